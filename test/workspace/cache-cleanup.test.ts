import { existsSync, mkdirSync, mkdtempSync, rmSync, utimesSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, expect, it, onTestFinished } from 'vitest'
import { listEntries, planCacheCleanup, removeEntry } from '../../src/workspace/environment/cache-cleanup.js'
import { entryDir, sha } from '../../src/workspace/environment/cache-store.js'

const DAY = 86_400_000
const NOW = Date.parse('2026-12-01T00:00:00Z')

/** An entry of `bytes` bytes last used `daysAgo` days before NOW. */
function entry(store: string, name: string, bytes: number, daysAgo: number): string {
  const dir = entryDir(store, 'acme/shop', sha(name))
  mkdirSync(join(dir, 'paths'), { recursive: true })
  writeFileSync(join(dir, 'paths', 'blob'), Buffer.alloc(bytes))
  writeFileSync(join(dir, 'entry.json'), '{"created_at":"2026-11-01T00:00:00Z","setup_seconds":1,"bytes":0}\n')
  const when = new Date(NOW - daysAgo * DAY)
  utimesSync(dir, when, when)
  return dir
}

describe("cleanup of the environments' cache", () => {
  it('removes results unused past the age, then the least recently used until the rest fits; a partial or locked one is never listed', () => {
    const store = mkdtempSync(join(tmpdir(), 'ctxagent-envcache-'))
    onTestFinished(() => rmSync(store, { recursive: true, force: true }))
    const old = entry(store, 'old', 1000, 30)
    const middle = entry(store, 'middle', 300_000, 5)
    const recent = entry(store, 'recent', 300_000, 1)
    const locked = entry(store, 'locked', 1000, 40)
    mkdirSync(`${locked}.lock`)
    // Being written: no entry.json yet.
    mkdirSync(join(entryDir(store, 'acme/shop', sha('partial')), 'paths'), { recursive: true })
    const entries = listEntries(store)
    expect(entries.map((e) => e.dir).sort()).toEqual([old, middle, recent].sort())
    const plan = planCacheCleanup(entries, 14 * DAY, 400_000, NOW)
    expect(plan.remove.map((e) => [e.dir, e.reason])).toEqual([
      [old, 'age'],
      [middle, 'size'],
    ])
    expect(plan.keep.map((e) => e.dir)).toEqual([recent])
    for (const e of plan.remove) removeEntry(e.dir)
    expect([old, middle, recent, locked].map(existsSync)).toEqual([false, false, true, true])
  })
})
