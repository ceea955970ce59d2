import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { SCHEMA_VERSION } from '../../src/storage/index/pg-schema.js'
import { ROOT } from '../helpers/run.js'

describe('examples in the docs stay true', () => {
  it("doctor's fleet line shows the schema version this build migrates to", () => {
    const doc = readFileSync(join(ROOT, 'docs', 'fleet-operations.md'), 'utf8')
    const shown = [...doc.matchAll(/schema version (\d+)/g)].map((m) => Number(m[1]))
    expect(shown.length).toBeGreaterThan(0)
    for (const v of shown) expect(v).toBe(SCHEMA_VERSION)
  })
})
