import { describe, expect, it } from 'vitest'
import { collectIfGrown, oldGenerationBytes } from '../../src/run/v8-tuning.js'

const MB = 1024 * 1024

/** Young garbage enough for several scavenges: what survives them (the kept arrays) is promoted. */
function scavengeSeveralTimes(): number {
  const ring: { i: number }[] = []
  for (let i = 0; i < 2_000_000; i++) ring[i % 1024] = { i }
  return ring.length
}

/** Keeps 1 MB arrays (large objects, old generation once promoted) until the old generation has grown past the collection's margin. */
function growOldGeneration(kept: number[][]): void {
  const floor = oldGenerationBytes()
  for (let i = 0; i < Math.ceil((floor / 3 + 8 * MB) / MB); i++) kept.push(new Array<number>(MB / 8).fill(i))
  expect(scavengeSeveralTimes()).toBeGreaterThan(0)
  expect(oldGenerationBytes() - floor).toBeGreaterThan(floor / 8 + 2 * MB)
}

/**
 * A CPU clock the test moves (µs): each read returns `now`, then `step` more for the next read. Each
 * clock starts 1,000 s after the one made before it: collectIfGrown keeps the last collection's end
 * for the process, so a test in any order starts long after whatever ran before it.
 */
let epoch = 0
function clock(step: number) {
  epoch += 1_000_000_000
  const c = { now: epoch, step, read: () => ((c.now += c.step), c.now - c.step) }
  return c
}

/**
 * The agent loop's bounded collection (src/run/v8-tuning.ts, docs/development.md#memory): a full
 * GC once the old generation holds an eighth more (at least 2 MB) than what survived the last one,
 * with V8's own gc, which this test process was not given (no --expose-gc), at most 1/50 of the CPU.
 */
describe('collectIfGrown', () => {
  it('collects once the old generation has grown by an eighth of its live size, and not before', () => {
    expect(typeof (globalThis as { gc?: unknown }).gc).toBe('undefined')
    const cpu = clock(1_000)
    // The process's first call takes the old generation as it is for its floor; any call may collect what an
    // earlier test left (whichever ran first), so the clock then moves past that collection's budget.
    collectIfGrown(cpu.read)
    cpu.now += 1_000_000
    expect(collectIfGrown(cpu.read)).toBe(false)
    const floor = oldGenerationBytes()
    const kept: number[][] = []
    growOldGeneration(kept)
    kept.length = 0
    expect(collectIfGrown(cpu.read)).toBe(true)
    expect(oldGenerationBytes()).toBeLessThan(floor + 4 * MB)
    // What survived is the new floor: no growth since, no collection.
    expect(collectIfGrown(cpu.read)).toBe(false)
    // gc stays V8's own business elsewhere: it was not exposed to this context.
    expect(typeof (globalThis as { gc?: unknown }).gc).toBe('undefined')
  })

  it('waits, grown or not, until the process has used 50 times the last collection’s CPU since it', () => {
    // Long after any earlier collection. The first call takes the floor and may collect what an earlier
    // test left; the clock then moves past that collection's budget (a collection costs 1 ms of this clock).
    const cpu = clock(1_000)
    collectIfGrown(cpu.read)
    cpu.now += 1_000_000
    const kept: number[][] = []
    growOldGeneration(kept)
    kept.length = 0
    expect(collectIfGrown(cpu.read)).toBe(true)
    growOldGeneration(kept)
    kept.length = 0
    // 49 ms of CPU since a collection that cost 1 ms: not yet.
    cpu.now += 48_000
    expect(collectIfGrown(cpu.read)).toBe(false)
    cpu.now += 1_000
    expect(collectIfGrown(cpu.read)).toBe(true)
  })
})
