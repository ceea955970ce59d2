import { readFileSync } from 'node:fs'
import { describe, expect, it } from 'vitest'
import { parse } from 'yaml'
import { parseConfig } from '../../src/config/load.js'

function keyPaths(value: unknown, prefix = ''): string[] {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) return [prefix]
  return Object.entries(value).flatMap(([k, v]) => keyPaths(v, prefix ? `${prefix}.${k}` : k))
}

describe('config.example.yaml', () => {
  const text = readFileSync(new URL('../../config.example.yaml', import.meta.url), 'utf8')

  it('documents every key, with exactly the defaults', () => {
    expect(keyPaths(parse(text)).sort()).toEqual(keyPaths(parseConfig('')).sort())
    expect(parseConfig(text)).toEqual(parseConfig(''))
  })
})
