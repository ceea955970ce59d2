import { Counter } from 'prom-client'
import type { Registry } from 'prom-client'
import { bucketCounter, SETUP_BUCKETS } from '../storage/index/env-totals.js'
import type { CounterRow } from '../storage/index/totals.js'
import { METRICS } from '../telemetry/names.js'
import type { Samples } from './metric-histograms.js'

/**
 * The repositories' environments on /metrics (docs/environments.md#what-is-counted): the
 * cache's results and setup's times, from the index's counters (`usage`: its rows by user
 * and model), which never fall.
 */
export function defineEnvMetrics(registry: Registry, usage: () => readonly CounterRow[]): void {
  new Counter({
    name: METRICS.envCache,
    help: "Tasks' environment cache results: hit (setup's result found), miss (setup ran for it), failed (setup failed or could not run)",
    labelNames: ['result'],
    registers: [registry],
    collect() {
      this.reset()
      for (const result of ['hit', 'miss', 'failed'] as const) this.inc({ result }, 0)
      for (const u of usage()) {
        this.inc({ result: 'hit' }, u.env_hit)
        this.inc({ result: 'miss' }, u.env_miss)
        this.inc({ result: 'failed' }, u.env_failed)
      }
    },
  })
  // A histogram made from the counters (prom-client's Histogram only observes): a metric object of its own.
  const help = "Time of the environments' setups that ran (a cache miss, or a setup that failed), in seconds"
  registry.registerMetric({
    name: METRICS.envSetup,
    help,
    type: 'histogram',
    get: async () => ({ name: METRICS.envSetup, help, type: 'histogram' as const, aggregator: 'sum' as const, values: setupHistogram(usage()) }),
  } as unknown as Parameters<Registry['registerMetric']>[0])
}

/** The setup histogram's exposition values: its counters are cumulative already. */
export function setupHistogram(rows: readonly CounterRow[]): Samples {
  const name = METRICS.envSetup
  const sum = (pick: (u: CounterRow) => number) => rows.reduce((n, u) => n + pick(u), 0)
  const count = sum((u) => u.setup_count)
  return [
    ...SETUP_BUCKETS.map((le) => ({ metricName: `${name}_bucket`, labels: { le }, value: sum((u) => u[bucketCounter(le)]) })),
    { metricName: `${name}_bucket`, labels: { le: '+Inf' }, value: count },
    { metricName: `${name}_sum`, labels: {}, value: sum((u) => u.setup_ms) / 1000 },
    { metricName: `${name}_count`, labels: {}, value: count },
  ]
}
