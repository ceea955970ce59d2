import { mkdirSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { setup } from './fixture.js'

describe('a long tool takes the stop', () => {
  it('glob over a large tree gives the event loop a turn, so a stop lands mid-walk', async () => {
    const controller = new AbortController()
    const s = setup({ signal: controller.signal })
    for (let d = 0; d < 10; d++) {
      mkdirSync(join(s.ws, `d${d}`))
      for (let f = 0; f < 1000; f++) writeFileSync(join(s.ws, `d${d}`, `f${f}.txt`), '')
    }
    // Fires at the walk's first turn of the event loop: without one, the whole walk ends first.
    setImmediate(() => controller.abort())
    const out = (await s.call('glob', { pattern: '*.txt' })).output
    const more = Number(/\((\d+) more matches not shown/.exec(out)?.[1] ?? 0)
    expect(100 + more).toBeLessThan(10_000)
  })
})
