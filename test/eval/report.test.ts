import { describe, expect, it } from 'vitest'
import { bootstrapInterval, pairedReport, passAtKOf, variantReport } from '../../src/eval/report.js'
import type { Trial } from '../../src/eval/report.js'

const trial = (variant: string, task: string, run: number, passed: boolean, usd: number): Trial => ({
  task,
  variant,
  run,
  passed,
  status: 'completed',
  uuid: null,
  usd,
  tokens: 100,
  turns: 2,
  duration_ms: 1000,
  check: null,
  finished_at: '2026-12-06T00:00:00.000Z',
})

describe("an eval's figures", () => {
  it('pass@1 is the mean over tasks of each task’s share of passing runs; $ per solved divides all the money by the passes', () => {
    const trials = [
      trial('a', 't1', 1, true, 0.1),
      trial('a', 't1', 2, false, 0.3),
      trial('a', 't2', 1, true, 0.2),
      trial('a', 't2', 2, true, 0.2),
      trial('b', 't1', 1, false, 0.05),
    ]
    const a = variantReport('a', trials)
    expect(a.pass_at_1).toBeCloseTo((0.5 + 1) / 2, 12)
    expect(a.solved).toBe(3)
    expect(a.usd).toBeCloseTo(0.8, 12)
    expect(a.usd_per_task).toBeCloseTo(0.2, 12)
    expect(a.usd_per_solved).toBeCloseTo(0.8 / 3, 12)
    // pass@2: t1 has one pass in two runs (a draw of both holds it), t2 two.
    expect(a.pass_at_k['2']).toBe(1)
    expect(variantReport('b', trials).usd_per_solved).toBeNull()
  })

  it('pass@k is 1 − C(n−c, k)/C(n, k)', () => {
    expect(passAtKOf(5, 0, 1)).toBe(0)
    expect(passAtKOf(5, 5, 3)).toBe(1)
    expect(passAtKOf(4, 1, 1)).toBeCloseTo(0.25, 12)
    // 1 − C(3,2)/C(5,2) = 1 − 3/10
    expect(passAtKOf(5, 2, 2)).toBeCloseTo(0.7, 12)
  })

  it('the paired interval holds the true difference, and the same trials give the same interval', () => {
    // 40 tasks: a solves 30, b solves 20, on the same tasks (b's a subset of a's): the true difference is +0.25.
    const trials: Trial[] = []
    for (let i = 0; i < 40; i++) {
      trials.push(trial('a', `t${i}`, 1, i < 30, 0.2))
      trials.push(trial('b', `t${i}`, 1, i < 20, 0.1))
    }
    const paired = pairedReport('a', 'b', trials, 12345)
    expect(paired).not.toBeNull()
    expect(paired?.pass_diff).toBeCloseTo(0.25, 12)
    const [low, high] = paired?.ci95 ?? [0, 0]
    expect(low).toBeLessThan(0.25)
    expect(high).toBeGreaterThan(0.25)
    expect(low).toBeGreaterThan(0)
    expect(paired?.usd_diff).toBeCloseTo(0.1, 12)
    expect(pairedReport('a', 'b', trials, 12345)).toEqual(paired)
  })

  it('a constant difference has an interval of that difference alone; no shared task, no comparison', () => {
    expect(bootstrapInterval([0.5, 0.5, 0.5], 1)).toEqual([0.5, 0.5])
    expect(pairedReport('a', 'b', [trial('a', 'x', 1, true, 0)], 1)).toBeNull()
  })
})
