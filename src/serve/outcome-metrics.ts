import { Counter } from 'prom-client'
import type { Registry } from 'prom-client'
import type { OutcomeFigures } from '../operations/outcomes-report.js'
import { METRICS } from '../telemetry/names.js'

/**
 * The pull/merge requests ctxagent opened, on /metrics (docs/contract.md §17): how many and
 * the money spent on them, by outcome, from the scrape's figures (`outcomes`).
 */
export function defineOutcomeMetrics(registry: Registry, outcomes: () => OutcomeFigures): void {
  const r = [registry]
  // The requests ctxagent opened (docs/contract.md §17): one moves from open to merged or closed when a refresh says it ended.
  new Counter({
    name: METRICS.pullRequests,
    help: 'Pull/merge requests ctxagent opened, by outcome: merged, closed (unmerged) or open (not ended, as last refreshed)',
    labelNames: ['outcome'],
    registers: r,
    collect() {
      this.reset()
      const o = outcomes()
      this.inc({ outcome: 'merged' }, o.merged)
      this.inc({ outcome: 'closed' }, o.closed)
      this.inc({ outcome: 'open' }, o.open)
    },
  })
  new Counter({
    name: METRICS.pullRequestUsd,
    help: 'USD spent on the pull/merge requests ctxagent opened (every task on each, follow-ups included, at config pricing), by outcome',
    labelNames: ['outcome'],
    registers: r,
    collect() {
      this.reset()
      const usd = outcomes().usd
      for (const outcome of ['merged', 'closed', 'open'] as const) this.inc({ outcome }, usd[outcome] ?? 0)
    },
  })
}
