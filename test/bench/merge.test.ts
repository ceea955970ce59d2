import { describe, expect, it } from 'vitest'
// @ts-expect-error: a bench module, plain JavaScript without types
import { mergeRows } from '../../bench/merge.mjs'

interface Row {
  suite: string
  name: string
  measured: string
}

const row = (suite: string, name: string, measured = 'old'): Row => ({ suite, name, measured })
const order = ['start', 'fleet', 'serve']
const names = (rows: Row[]) => rows.map((r) => `${r.suite}/${r.name}:${r.measured}`)

describe('BENCHMARKS.md rows after a run (bench/merge.mjs)', () => {
  const previous = [
    row('start', 'start-run'),
    row('fleet', 'fleet-dispatch'),
    row('fleet', 'fleet-claims'),
    row('fleet', 'fleet-wake-one'),
    row('serve', 'serve-list'),
  ]

  it('a suite run whole replaces all its rows: one it no longer writes goes', () => {
    const results = [row('fleet', 'fleet-dispatch', 'new'), row('fleet', 'fleet-claims', 'new')]
    const merged = mergeRows({ previous, results, suites: ['fleet'], order, inPlace: () => false })
    expect(names(merged)).toEqual(['start/start-run:old', 'fleet/fleet-dispatch:new', 'fleet/fleet-claims:new', 'serve/serve-list:old'])
  })

  it('a suite run in part (CTXAGENT_BENCH_FLEET_PARTS=dispatch) keeps the rows of the parts it did not run', () => {
    const results = [row('fleet', 'fleet-dispatch', 'new')]
    const merged = mergeRows({ previous, results, suites: ['fleet'], order, inPlace: (s: string) => s === 'fleet' })
    expect(names(merged)).toEqual([
      'start/start-run:old',
      'fleet/fleet-dispatch:new',
      'fleet/fleet-claims:old',
      'fleet/fleet-wake-one:old',
      'serve/serve-list:old',
    ])
  })

  it('a row new to the file is added, its suite’s rows kept together, in place or not', () => {
    for (const inPlace of [() => true, () => false]) {
      const results = [row('fleet', 'fleet-dispatch', 'new'), row('fleet', 'fleet-new', 'new')]
      const merged = mergeRows({ previous, results, suites: ['fleet'], order, inPlace })
      expect(names(merged).filter((n) => n.startsWith('fleet/fleet-new'))).toEqual(['fleet/fleet-new:new'])
      expect(merged.map((r: Row) => r.suite)).toEqual([...merged.map((r: Row) => r.suite)].sort((a, b) => order.indexOf(a) - order.indexOf(b)))
    }
  })
})
