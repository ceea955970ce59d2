import { Counter, Gauge, Registry } from 'prom-client'
import type { CommandEnv } from '../command-env.js'
import type { CheckResult } from '../operations/stats.js'
import { checkAlerts, collectStats } from '../operations/stats.js'
import { billFrom } from '../operations/tokens.js'
import { collectOutcomes } from '../operations/outcomes.js'
import { figures } from '../operations/outcomes-report.js'
import type { OutcomeFigures } from '../operations/outcomes-report.js'
import { assessTask } from '../operations/reaper.js'
import { resolveTask } from '../storage/fs/layout.js'
import { taskDiskUse } from '../storage/fs/disk.js'
import { LOCATIONS } from '../storage/fs/layout.js'
import type { Location } from '../storage/fs/layout.js'
import type { CounterRow, IndexTotals } from '../storage/index/totals.js'
import { stalenessPolicy } from '../storage/task/env.js'
import { COUNTER_COLUMNS } from '../storage/index/counter-eras.js'
import { DELIVERY_RESULTS } from '../storage/task/delivery.js'
import { METRICS } from '../telemetry/names.js'
import { durationHistogram } from './metric-histograms.js'
import { defineFleetMetrics } from './fleet-metrics.js'
import { defineEnvMetrics } from './env-metrics.js'
import { defineOutcomeMetrics } from './outcome-metrics.js'
import type { FleetScrape } from './fleet-metrics.js'
import type { IndexSource } from './data.js'
import type { FleetSource } from './fleet-data.js'
import { queueAlerts } from '../fleet/queue/status.js'
import { ctxagentVersion } from '../version.js'

/** What one scrape read, shared by the collect() callbacks of that scrape. */
interface Scrape {
  totals: IndexTotals
  disk: Record<Location, number>
  check: CheckResult
  fleet: FleetScrape | null
  outcomes: OutcomeFigures
}

/**
 * /metrics: a prom-client Registry of its own whose collect() callbacks read the index's
 * running totals (totals.ts: a few dozen rows, kept by triggers) at scrape time. Counters
 * are the live rows' sums plus what deleted tasks left, so they survive restarts of serve
 * and cleanup alike: they never fall.
 */
export class MetricsCollector {
  readonly registry = new Registry()
  private current: Scrape | null = null

  constructor(
    private readonly ctx: CommandEnv,
    private readonly index: IndexSource,
    private readonly fleet: FleetSource,
  ) {
    this.define()
  }

  get contentType(): string {
    return this.registry.contentType
  }

  async scrape(): Promise<string> {
    let totals = await this.index.totals()
    if (totals.tasks.some((t) => t.location === 'completed' && t.unmeasured > 0)) {
      // Reindexed tasks not measured yet: stats' pass measures and caches them once (the triggers then count them).
      collectStats(await this.index.rows(), this.ctx.layout, {}, this.index.kind)
      totals = await this.index.totals()
    }
    totals = { ...totals, counters: this.soundCounters(totals.counters) }
    const disk = diskUse(this.ctx, totals)
    const by_location = Object.fromEntries(LOCATIONS.map((l) => [l, 0])) as Record<Location, number>
    const by_status: Record<string, number> = {}
    for (const t of totals.tasks) {
      by_location[t.location] = (by_location[t.location] ?? 0) + t.tasks
      by_status[t.status] = (by_status[t.status] ?? 0) + t.tasks
    }
    const total = Object.values(by_location).reduce((a, b) => a + b, 0)
    const running = totals.live.filter((t) => t.location === 'running')
    const check = checkAlerts(
      { total, by_location, by_status, disk: { total: disk.running + disk.paused + disk.completed } },
      running,
      this.ctx.layout,
      this.ctx.config,
      this.ctx.now(),
    )
    let fleet: Scrape['fleet'] = null
    let fleetError = 0
    if (this.fleet.configured) {
      try {
        fleet = { status: await this.fleet.status(), ...(await this.fleet.queueFigures()) }
      } catch (err) {
        fleetError = 1
        this.ctx.io.warn(`metrics: the fleet's database cannot be read (${(err as Error).message})`)
      }
    }
    if (fleet !== null) {
      check.alerts.push(...queueAlerts(fleet.status, this.ctx.config.alerts.queue_wait_minutes))
      check.status = check.alerts.some((a) => a.level === 'critical') ? 'critical' : check.alerts.length ? 'warning' : 'ok'
    }
    const outcomes = figures(collectOutcomes(await this.index.rows(), this.ctx.layout, this.ctx.config.pricing))
    this.current = { totals, disk, check, fleet, outcomes }
    this.fleetError = fleetError
    try {
      return await this.registry.metrics()
    } finally {
      this.current = null
    }
  }

  private fleetError = 0

  /**
   * Counters as Prometheus takes them (never falling): an index written before usage
   * figures were checked may hold a negative, fractional or huge sum, which would fail
   * the whole scrape. Such a figure counts as 0 and the log says how to mend it.
   */
  private soundCounters(rows: CounterRow[]): CounterRow[] {
    let bad = 0
    const sound = rows.map((row) => {
      const out = { ...row }
      for (const key of COUNTER_COLUMNS) {
        const n = out[key]
        if (typeof n === 'number' && Number.isSafeInteger(n) && n >= 0) continue
        out[key] = 0
        bad++
      }
      return out
    })
    if (bad > 0)
      this.ctx.io.warn(
        `metrics: ${bad} counter(s) in the index are not whole numbers of 0 or more (a state.json from an older version): counted as 0; run ctxagent reindex`,
      )
    return sound
  }

  private get s(): Scrape {
    if (this.current === null) throw new Error('a metric was collected outside a scrape')
    return this.current
  }

  private define(): void {
    const r = [this.registry]
    const self = this

    // The usual build_info: constant 1, the labels say what answers (for joins and upgrade dashboards).
    new Gauge({
      name: METRICS.buildInfo,
      help: "ctxagent's version and the Node.js that runs serve (always 1)",
      labelNames: ['version', 'node'],
      registers: r,
      collect() {
        this.set({ version: ctxagentVersion(), node: process.version }, 1)
      },
    })

    new Gauge({
      name: METRICS.tasks,
      help: 'Tasks in the tree by location and status',
      labelNames: ['location', 'status'],
      registers: r,
      collect() {
        this.reset()
        const n = new Map<string, { location: string; status: string; n: number }>()
        for (const t of self.s.totals.tasks) {
          const key = `${t.location}\0${t.status}`
          const entry = n.get(key) ?? { location: t.location, status: t.status, n: 0 }
          entry.n += t.tasks
          n.set(key, entry)
        }
        for (const e of n.values()) this.set({ location: e.location, status: e.status }, e.n)
      },
    })

    const usage = (): CounterRow[] => self.s.totals.counters
    // The kinds partition the tokens (sum() over them is the total, each token once): the prompt is input (neither read
    // from the provider's cache nor written to it), cached (read) and cache_write (written); then output, and unsplit.
    new Counter({
      name: METRICS.tokens,
      help: 'Tokens of all tasks the index has held, by user, model and kind; the kinds partition them: input (prompt tokens neither read from nor written to the cache), cached (read from the cache), cache_write (written to the cache), output, unsplit (older tasks without the split)',
      labelNames: ['user', 'model', 'kind'],
      registers: r,
      collect() {
        this.reset()
        for (const u of usage()) {
          const labels = { user: u.user, model: u.model }
          const written = Math.min(u.cache_write, Math.max(0, u.prompt - u.cached))
          this.inc({ ...labels, kind: 'input' }, Math.max(0, u.prompt - u.cached - written))
          this.inc({ ...labels, kind: 'cached' }, u.cached)
          this.inc({ ...labels, kind: 'cache_write' }, written)
          this.inc({ ...labels, kind: 'output' }, u.completion)
          this.inc({ ...labels, kind: 'unsplit' }, Math.max(0, u.tokens - u.prompt - u.completion))
        }
      },
    })
    new Counter({
      name: METRICS.cost,
      help: 'Cost in USD from config pricing, by user and model (models without a price are left out)',
      labelNames: ['user', 'model'],
      registers: r,
      collect() {
        this.reset()
        for (const u of usage()) {
          // The bill stats, view and export give (docs/running.md#budgets): the turns, the compactions and final summaries.
          const summaries = { requests: 0, prompt_tokens: u.summary_prompt, completion_tokens: u.summary_completion, cached_tokens: u.summary_cached }
          const turns = { prompt: u.prompt, cached: u.cached, cache_write: u.cache_write, completion: u.completion }
          const cost = billFrom(u.model, turns, [summaries], self.ctx.config.pricing)
          if (cost !== null) this.inc({ user: u.user, model: u.model }, cost)
        }
      },
    })
    defineOutcomeMetrics(this.registry, () => self.s.outcomes)
    const sums: [string, string, (u: CounterRow) => number][] = [
      [METRICS.compactions, 'Context compactions (summaries made), by user and model', (u) => u.compactions],
      [METRICS.turns, 'Agent turns (one LLM call each), by user and model', (u) => u.llm_calls],
      [METRICS.toolCalls, `Tool calls, by user and model (by tool and outcome: ${METRICS.toolCallsByTool})`, (u) => u.tool_calls],
      [METRICS.messages, 'Messages recorded, by user and model', (u) => u.messages],
    ]
    // Every LLM request, by what it was for: a turn, a compaction's summary, the final summary (docs/serve.md#metrics).
    new Counter({
      name: METRICS.llmCalls,
      help: 'LLM calls, by user, model and purpose: turn, summary (a compaction), final-summary',
      labelNames: ['user', 'model', 'purpose'],
      registers: r,
      collect() {
        this.reset()
        for (const u of usage()) {
          const labels = { user: u.user, model: u.model }
          this.inc({ ...labels, purpose: 'turn' }, u.llm_calls)
          this.inc({ ...labels, purpose: 'summary' }, u.summary_calls)
          this.inc({ ...labels, purpose: 'final-summary' }, u.final_summary_calls)
        }
      },
    })
    for (const [name, help, value] of sums) {
      new Counter({
        name,
        help,
        labelNames: ['user', 'model'],
        registers: r,
        collect() {
          this.reset()
          for (const u of usage()) this.inc({ user: u.user, model: u.model }, value(u))
        },
      })
    }

    // Completed tasks' deliveries by how they ended (docs/delivery.md#what-is-recorded): refused and failed are the loud ones.
    new Counter({
      name: METRICS.deliveries,
      help: 'Deliveries of completed tasks by result: delivered, no_changes, refused, failed',
      labelNames: ['result'],
      registers: r,
      collect() {
        this.reset()
        for (const result of DELIVERY_RESULTS) this.inc({ result }, 0)
        for (const u of usage()) {
          this.inc({ result: 'delivered' }, u.deliveries_delivered)
          this.inc({ result: 'no_changes' }, u.deliveries_no_changes)
          this.inc({ result: 'refused' }, u.deliveries_refused)
          this.inc({ result: 'failed' }, u.deliveries_failed)
        }
      },
    })

    defineEnvMetrics(this.registry, usage)

    // Labels bounded where they are counted (storage/task/tool-tally.ts): built-in tools, mcp:<server>, other, unknown.
    new Counter({
      name: METRICS.toolCallsByTool,
      help: 'Tool calls by tool (built-in name, mcp:<server>, other: a name no tool has, unknown: before tasks counted them) and outcome (success, error)',
      labelNames: ['tool', 'outcome'],
      registers: r,
      collect() {
        this.reset()
        for (const t of self.s.totals.tools) this.inc({ tool: t.tool, outcome: t.outcome }, t.n)
      },
    })

    // A histogram made from the totals: prom-client's Histogram only observes, so this is a metric object of its own.
    this.registry.registerMetric({
      name: METRICS.taskDuration,
      help: 'Durations of finished tasks (started to completed), in seconds',
      type: 'histogram',
      get: async () => ({
        name: METRICS.taskDuration,
        help: 'Durations of finished tasks (started to completed), in seconds',
        type: 'histogram' as const,
        aggregator: 'sum' as const,
        values: durationHistogram(self.s.totals),
      }),
    } as unknown as Parameters<Registry['registerMetric']>[0])

    new Gauge({
      name: METRICS.locksStale,
      help: 'Tasks in running/ whose lock is stale (owner dead or silent): reaped by the next watch-locks pass',
      registers: r,
      collect() {
        let stale = 0
        const env = { layout: self.ctx.layout, config: self.ctx.config, index: null, now: () => self.ctx.now(), warn: () => undefined }
        for (const uuid of self.ctx.layout.list('running')) {
          try {
            if (assessTask(env, resolveTask(self.ctx.layout, uuid), { policy: stalenessPolicy(self.ctx.config) }).stale) stale++
          } catch {
            // Moved while looking: not stale here.
          }
        }
        this.set(stale)
      },
    })
    new Counter({
      name: METRICS.locksReaped,
      help: 'Tasks whose dead agent was reaped (their error says so), in the index',
      registers: r,
      collect() {
        this.reset()
        this.inc(self.s.totals.counters.reduce((sum, u) => sum + u.reaped, 0))
      },
    })
    new Gauge({
      name: METRICS.disk,
      help: 'Disk use of the task tree by location, in bytes',
      labelNames: ['location'],
      registers: r,
      collect() {
        const d = self.s.disk
        this.set({ location: 'running' }, d.running)
        this.set({ location: 'paused' }, d.paused)
        this.set({ location: 'completed' }, d.completed)
      },
    })
    new Gauge({
      name: METRICS.alert,
      help: "stats --check's alerts now firing: 1 per alert, by name and severity",
      labelNames: ['name', 'severity'],
      registers: r,
      collect() {
        this.reset()
        for (const a of self.s.check.alerts) this.set({ name: a.metric, severity: a.level }, 1)
      },
    })
    new Gauge({
      name: METRICS.alertStatus,
      help: "stats --check's status: 0 ok, 1 warning, 2 critical",
      registers: r,
      collect() {
        const st = self.s.check.status
        this.set(st === 'ok' ? 0 : st === 'warning' ? 1 : 2)
      },
    })

    // The fleet: present only when it is configured (and readable at this scrape).
    defineFleetMetrics(
      this.registry,
      () => self.s.fleet,
      () => self.fleetError,
    )
  }

  /** This serve's live followers (docs/serve.md#live-followers): read at scrape time. */
  addLive(counts: () => { followers: number; watchers: number; refused: number }): void {
    const r = [this.registry]
    new Gauge({
      name: METRICS.followers,
      help: 'Live (SSE) followers of running tasks connected to this serve',
      registers: r,
      collect() {
        this.set(counts().followers)
      },
    })
    new Gauge({
      name: METRICS.followWatchers,
      help: 'Running tasks this serve reads for its live followers (one reader per task, shared)',
      registers: r,
      collect() {
        this.set(counts().watchers)
      },
    })
    new Counter({
      name: METRICS.followersRefused,
      help: 'Live followers refused (503) past serve.max_followers_per_task or serve.max_followers since this serve started',
      registers: r,
      collect() {
        this.reset()
        this.inc(counts().refused)
      },
    })
  }
}

/** Disk use by location: running and paused tasks measured now, completed ones from their cached sizes. */
function diskUse(ctx: CommandEnv, totals: IndexTotals): Record<Location, number> {
  const disk: Record<Location, number> = { running: 0, paused: 0, completed: 0 }
  for (const t of totals.live) disk[t.location] += taskDiskUse(ctx.layout.taskDir(t.location, t.uuid)).bytes
  for (const t of totals.tasks) if (t.location === 'completed') disk.completed += t.disk_bytes
  return disk
}
