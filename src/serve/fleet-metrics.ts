import { Counter, Gauge } from 'prom-client'
import type { Registry } from 'prom-client'
import type { FleetStatus } from '../fleet/queue/status.js'
import type { FleetCounts } from '../storage/index/fleet-counters.js'
import type { QueueWaitRow } from '../storage/index/queue-waits.js'
import { METRICS } from '../telemetry/names.js'
import { waitHistogram } from './metric-histograms.js'

/** What one scrape read of the fleet's database. */
export interface FleetScrape {
  status: FleetStatus
  waits: QueueWaitRow[]
  counts: FleetCounts
}

/**
 * /metrics' fleet series (docs/serve.md#metrics), read at scrape time from `fleet()`: null
 * when no fleet is configured or its database could not be read at this scrape (then
 * `scrapeError()` is 1 and the series are empty).
 */
export function defineFleetMetrics(registry: Registry, fleet: () => FleetScrape | null, scrapeError: () => number): void {
  const r = [registry]
  new Gauge({
    name: METRICS.jobs,
    help: 'Fleet jobs by state',
    labelNames: ['state'],
    registers: r,
    collect() {
      this.reset()
      for (const [state, n] of Object.entries(fleet()?.status.jobs ?? {})) this.set({ state }, n)
    },
  })
  // The fleet's counters: running totals kept by triggers as each event happens, which cleanup leaves (storage/index/fleet-counters.ts): they never fall.
  new Counter({
    name: METRICS.jobOutcomes,
    help: 'Finished fleet jobs by what their task became',
    labelNames: ['outcome'],
    registers: r,
    collect() {
      this.reset()
      for (const [outcome, n] of Object.entries(fleet()?.counts.finished ?? {})) this.inc({ outcome }, n)
    },
  })
  // Counted as each attempt enters the jobs' history (fleet_job_attempts): a healed outage leaves a trace here, not an alert.
  new Counter({
    name: METRICS.jobRetries,
    help: 'Attempts of fleet jobs after which the job ran again, by reason (outage, rate-limit, budget, died, killed, refused, stopped)',
    labelNames: ['reason'],
    registers: r,
    collect() {
      this.reset()
      for (const [reason, n] of Object.entries(fleet()?.counts.retries ?? {})) this.inc({ reason }, n)
    },
  })
  new Counter({
    name: METRICS.budgetPauses,
    help: 'Attempts of fleet jobs that ended paused by a budget, by cap',
    labelNames: ['cap'],
    registers: r,
    collect() {
      this.reset()
      for (const [cap, n] of Object.entries(fleet()?.counts.budget_pauses ?? {})) this.inc({ cap }, n)
    },
  })
  // Observed once per claim, in the claim's statement, into totals nothing deletes (storage/index/queue-waits.ts): it never falls.
  const waitHelp = 'How long each claimed job had waited to be claimed (since it was queued or handed back to wait, or its retry came due), in seconds'
  registry.registerMetric({
    name: METRICS.queueWait,
    type: 'histogram',
    help: waitHelp,
    get: async () => ({
      name: METRICS.queueWait,
      help: waitHelp,
      type: 'histogram' as const,
      aggregator: 'sum' as const,
      values: waitHistogram(fleet()?.waits ?? []),
    }),
  } as unknown as Parameters<Registry['registerMetric']>[0])
  new Gauge({
    name: METRICS.oldestWaiting,
    help: 'Age of the oldest waiting job in seconds (0: none waits)',
    registers: r,
    collect() {
      this.reset()
      const status = fleet()?.status
      if (status !== undefined) this.set(status.oldest_waiting?.waiting_seconds ?? 0)
    },
  })
  new Gauge({
    name: METRICS.workers,
    help: 'Fleet workers (not stopped) by state: live, or dead (heartbeat too old)',
    labelNames: ['state'],
    registers: r,
    collect() {
      this.reset()
      const workers = fleet()?.status.workers
      if (workers === undefined) return
      this.set({ state: 'live' }, workers.filter((w) => w.live).length)
      this.set({ state: 'dead' }, workers.filter((w) => !w.live).length)
    },
  })
  new Counter({
    name: METRICS.claims,
    help: 'Claims of fleet jobs by a worker, by its host',
    labelNames: ['host'],
    registers: r,
    collect() {
      this.reset()
      for (const [host, n] of Object.entries(fleet()?.counts.claims ?? {})) this.inc({ host }, n)
    },
  })
  new Gauge({
    name: METRICS.scrapeErrors,
    help: "1 when this scrape could not read the fleet's database",
    registers: r,
    collect() {
      this.set(scrapeError())
    },
  })
}
