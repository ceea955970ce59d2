import type { IndexTotals } from '../storage/index/totals.js'
import { DURATION_BUCKETS } from '../storage/index/totals.js'
import type { QueueWaitRow } from '../storage/index/queue-waits.js'
import { METRICS } from '../telemetry/names.js'

/**
 * /metrics' histograms, made from running totals kept per bucket (prom-client's Histogram
 * only observes in memory): metric objects of their own whose values are these.
 */

/** The duration histogram's exposition values from the totals' per-bucket counts. */
export function durationHistogram(totals: IndexTotals): Samples {
  const name = METRICS.taskDuration
  const per = DURATION_BUCKETS.map((_, i) => totals.durations.find((d) => d.bucket === i)?.n ?? 0)
  const count = totals.durations.reduce((sum, d) => sum + d.n, 0)
  const totalMs = totals.durations.reduce((sum, d) => sum + d.total_ms, 0)
  let cumulative = 0
  return [
    ...DURATION_BUCKETS.map((le, i) => ({ metricName: `${name}_bucket`, labels: { le }, value: (cumulative += per[i] as number) })),
    { metricName: `${name}_bucket`, labels: { le: '+Inf' }, value: count },
    { metricName: `${name}_sum`, labels: {}, value: totalMs / 1000 },
    { metricName: `${name}_count`, labels: {}, value: count },
  ]
}

/** The queue wait histogram's exposition values from its per-bucket totals (made cumulative here). */
export function waitHistogram(rows: readonly QueueWaitRow[]): Samples {
  const name = METRICS.queueWait
  if (rows.length === 0) return []
  let cumulative = 0
  let sum = 0
  const buckets = rows.map((r) => {
    cumulative += r.n
    sum += r.sum_seconds
    return { metricName: `${name}_bucket`, labels: { le: Number.isFinite(r.le) ? r.le : '+Inf' }, value: cumulative }
  })
  return [
    ...buckets,
    { metricName: `${name}_sum`, labels: {}, value: Math.round(sum * 1000) / 1000 },
    { metricName: `${name}_count`, labels: {}, value: cumulative },
  ]
}

/** A histogram's exposition values: cumulative buckets, +Inf, sum, count. */
export type Samples = { metricName: string; labels: Record<string, string | number>; value: number }[]
