import { Command, Option } from 'commander'
import type { CommandEnv } from '../../command-env.js'
import { auditTask, fleetDatabaseUrl, openIndex } from '../../command-env.js'
import { formatBytes, formatDuration } from '../../duration.js'
import { NotFoundError, UsageError } from '../../errors.js'
import { clip, grouped, sampleOf, shortPath } from '../../text.js'
import { table } from '../../render.js'
import { STATUSES } from '../../storage/task/state.js'
import { checkHealth, collectStats, scanIntoMemory, where } from '../../operations/stats.js'
import { collectTokens } from '../../operations/tokens.js'
import type { TokenReport } from '../../operations/tokens.js'
import type { CheckResult, StatsFilter, StatsReport } from '../../operations/stats.js'
import { indexDrift } from '../../storage/index/store.js'
import type { IndexStore } from '../../storage/index/store.js'
import type { TaskIndex } from '../../storage/index/task-index.js'
import { pgReason } from '../../storage/index/pg-pool.js'
import { whyIndexUnopenable } from '../../system-errors.js'
import { withEnv } from '../../command-kit/shared.js'
import { capAlerts, collectSpend } from '../../operations/spend-report.js'
import type { SpendReport } from '../../operations/spend-report.js'
import { usd } from '../../operations/budgets.js'
import { dateFrom, dateTo, userName } from '../../command-kit/filter-args.js'
import { checkOutcomeOptions, outcomeGroup, statsOutcomes } from './outcomes.js'
import type { OutcomesOptions } from './outcomes.js'
import { OUTCOME_GROUPS } from '../../operations/outcomes-report.js'

interface StatsOptions extends OutcomesOptions {
  user?: string
  from?: Date
  to?: Date
  status?: string
  check?: boolean
}

export function statsCommand(): Command {
  return new Command('stats')
    .description('totals, disk use, averages and a per-user table; --check for monitoring alerts')
    .option('--user <name>', 'only tasks of this user', userName)
    .option('--from <date>', 'only tasks created on or after this date (2024-01-01, today, yesterday, 2d or 12h ago, or an ISO time)', dateFrom)
    .option('--to <date>', 'only tasks created up to this date (a date includes its whole day)', dateTo)
    .addOption(new Option('--status <status>', 'only tasks with this status').choices([...STATUSES]))
    .option(
      '--check',
      'evaluate the alerts (disk, failure rate, running tasks, long runs) over the whole tree and exit 0 ok, 1 warning, 2 critical (3 unknown: no task tree); takes no filters',
    )
    .option('--outcomes', 'the pull/merge requests ctxagent opened: merged, closed, still open, merge rate, time to merge, rounds and $ per merged one')
    .option('--refresh', 'with --outcomes: ask the forge for the state of the ones still open first')
    .option('--by <group>', `with --outcomes: one row per ${OUTCOME_GROUPS.join(', ')} (default model)`, outcomeGroup)
    .option('--since <date>', 'with --outcomes: only the ones opened on or after this date (as --from)', dateFrom)
    .action(withEnv(stats))
}

/** Flags that contradict each other are refused before anything is read or written. */
function checkOptions(opts: StatsOptions): void {
  if (opts.check) {
    const filters = (['user', 'status', 'from', 'to'] as const).filter((k) => opts[k] !== undefined).map((k) => `--${k}`)
    if (filters.length > 0) {
      throw new UsageError(
        `--check evaluates the whole task tree; ${filters.join(', ')} cannot narrow it`,
        `drop ${filters.join(' and ')}, or run stats without --check for filtered figures`,
      )
    }
  }
  if (opts.from !== undefined && opts.to !== undefined && opts.from.getTime() >= opts.to.getTime()) {
    throw new UsageError('--from is not before --to, so no task could match', 'give the earlier date with --from; a --to day includes its whole day')
  }
}

/**
 * tasks.db, when it agrees with the directories: each location's count in the index
 * against a listing of it (cheap; reading every task is not). An index that drifted
 * (a crash between a move and its row, a copy by hand) is not trusted: the directories
 * are scanned instead, with a warning that says how to repair it. The warning is
 * returned, to be printed once the statistics are: if the scan fails too, its error
 * is the one line.
 */
async function trustedIndex(ctx: CommandEnv): Promise<{ index: IndexStore | null; warning: string | null }> {
  let index: IndexStore | null
  const pg = fleetDatabaseUrl(ctx) !== null
  const name = pg ? 'the PostgreSQL index' : 'tasks.db'
  try {
    index = await openIndex(ctx, false)
  } catch (err) {
    const why = pg ? pgReason(err) : whyIndexUnopenable(err, ctx.layout.base)
    return { index: null, warning: `${name} cannot be opened (${why}): counting from the directories instead` }
  }
  if (index === null) return { index: null, warning: `no tasks.db under ${ctx.layout.base}: scanning the directories (run ctxagent reindex to make this fast)` }
  let drift
  try {
    drift = await indexDrift(index, ctx.layout)
  } catch (err) {
    await index.close()
    return { index: null, warning: `${name} cannot be read (${pgReason(err)}): counting from the directories instead` }
  }
  if (drift.length === 0) return { index, warning: null }
  await index.close()
  const what = drift.map((d) => `${d.location}/ has ${d.found}, the index ${d.indexed}`).join('; ')
  return { index: null, warning: `${name} is out of date (${what}): counting from the directories instead (run ctxagent reindex to repair it)` }
}

/** The rows the reporting queries run on: the index's, or a scan's in memory. */
async function reportingIndex(
  ctx: CommandEnv,
): Promise<{ index: TaskIndex; store: IndexStore | null; owned: boolean; warning: string | null; unreadable: { uuid: string; error: string }[] }> {
  const { index: store, warning } = await trustedIndex(ctx)
  if (store !== null) {
    try {
      const { db, owned } = await store.reporting()
      return { index: db, store, owned, warning, unreadable: [] }
    } catch (err) {
      await store.close()
      const scanned = await scanIntoMemory(ctx.layout)
      return { ...scanned, store: null, owned: false, warning: `${store.name} cannot be read (${pgReason(err)}): counting from the directories instead` }
    }
  }
  return { ...(await scanIntoMemory(ctx.layout)), store: null, owned: false, warning }
}

async function stats(ctx: CommandEnv, opts: StatsOptions): Promise<void> {
  checkOutcomeOptions(opts)
  if (opts.outcomes) {
    if (!ctx.layout.exists())
      throw new NotFoundError(`there is no task tree at ${shortPath(ctx.layout.base)}`, 'check --home, CTXAGENT_HOME or context.base_dir')
    return statsOutcomes(ctx, opts)
  }
  checkOptions(opts)
  // A misspelt --home must not look like a healthy, empty tree (for --check, 3 is UNKNOWN).
  if (!ctx.layout.exists()) throw new NotFoundError(`there is no task tree at ${shortPath(ctx.layout.base)}`, 'check --home, CTXAGENT_HOME or context.base_dir')
  const { index, store, owned, warning, unreadable } = await reportingIndex(ctx)
  try {
    const filter: StatsFilter = { user: opts.user, from: opts.from, to: opts.to, status: opts.status }
    const report = collectStats(index, ctx.layout, filter, store === null ? 'scan' : store.name === 'PostgreSQL' ? 'postgresql' : 'tasks.db')
    report.tokens = collectTokens(index, ctx.layout, where(filter), ctx.config.pricing)
    if (store !== null) report.spend = await collectSpend(store, ctx.config, ctx.now(), filter)
    if (warning) ctx.io.warn(warning)
    if (unreadable.length > 0) ctx.io.warn(uncountedWarning(unreadable))
    auditTask(ctx, opts.check ? 'stats --check' : 'stats', null)
    if (opts.check) {
      const result = checkHealth(report, index, ctx.layout, ctx.config, ctx.now())
      if (report.spend) addAlerts(result, capAlerts(report.spend, ctx.config.budgets.warn_at))
      if (fleetDatabaseUrl(ctx) !== null) await addQueueAlerts(ctx, result)
      if (ctx.json) ctx.io.json(result)
      else ctx.io.out(renderCheck(result))
      process.exitCode = result.status === 'critical' ? 2 : result.status === 'warning' ? 1 : 0
      return
    }
    if (ctx.json) {
      const { source: _source, ...data } = report
      ctx.io.json(data)
      return
    }
    ctx.io.out(renderStats(ctx, report, filter))
  } finally {
    if (!owned) index.close()
    await store?.close()
  }
}

/** In a fleet (docs/contract.md §14.2): the queue's alerts join the others; a database that cannot be reached is critical. */
async function addQueueAlerts(ctx: CommandEnv, result: CheckResult): Promise<void> {
  const { fleetPool } = await import('../../actions/fleet-db.js')
  const { fleetStatus, queueAlerts } = await import('../../fleet/queue/status.js')
  const { workerLiveSeconds } = await import('../../storage/index/worker-liveness.js')
  let alerts
  try {
    const { pool } = await fleetPool(ctx, 'stats')
    try {
      const status = await fleetStatus(pool, workerLiveSeconds(ctx.config.locks))
      const { leaseAlerts } = await import('../../fleet/recovery/lease.js')
      alerts = [...queueAlerts(status, ctx.config.alerts.queue_wait_minutes), ...(await leaseAlerts(pool))]
      result.summary += `, ${status.jobs.waiting} job(s) waiting, ${status.workers.filter((w) => w.live).length} live worker(s)`
    } finally {
      await pool.end().catch(() => undefined)
    }
  } catch (err) {
    alerts = [{ level: 'critical' as const, metric: 'queue_no_worker' as const, value: 0, threshold: 0, message: (err as Error).message }]
  }
  result.alerts.push(...alerts)
  result.status = result.alerts.some((a) => a.level === 'critical') ? 'critical' : result.alerts.length ? 'warning' : 'ok'
}

function addAlerts(result: CheckResult, alerts: CheckResult['alerts']): void {
  result.alerts.push(...alerts)
  result.status = result.alerts.some((a) => a.level === 'critical') ? 'critical' : result.alerts.length ? 'warning' : 'ok'
}

/** Spend per user per day, and each cap against its window's spend. */
function spendLines(ctx: CommandEnv, s: SpendReport): string[] {
  if (s.days.length === 0 && s.caps.length === 0) return []
  const lines = ['', `Spend (days in ${s.timezone}):`]
  if (s.days.length > 0)
    lines.push(
      table(
        ctx.io,
        ['day', 'user', 'spend', 'requests'],
        s.days.map((d) => [d.day, d.user, usd(d.usd), grouped(d.requests)]),
      ),
    )
  if (s.caps.length > 0) {
    lines.push('Caps:')
    lines.push(
      table(
        ctx.io,
        ['cap', 'user', 'spent', 'cap', 'used', 'resets'],
        s.caps.map((c) => [c.cap, c.user ?? '(fleet)', usd(c.spent), usd(c.limit), `${(c.share * 100).toFixed(0)}%`, c.resets_at]),
      ),
    )
  }
  return lines
}

function renderCheck(result: CheckResult): string {
  const head = `CTXAGENT ${result.status.toUpperCase()} - ${result.alerts.length === 0 ? result.summary : `${result.alerts.length} alert(s); ${result.summary}`}`
  return [head, ...result.alerts.map((a) => `${a.level.toUpperCase()}: ${a.message}`)].join('\n')
}

function renderStats(ctx: CommandEnv, r: StatsReport, filter: StatsFilter): string {
  const c = ctx.io.chalk
  const n = grouped
  const filters = [
    filter.user && `user ${filter.user}`,
    filter.status && `status ${filter.status}`,
    filter.from && `from ${filter.from.toISOString().slice(0, 10)}`,
    filter.to && `before ${filter.to.toISOString().slice(0, 10)}`,
  ].filter(Boolean)
  const lines = [c.bold('Context Storage Statistics'), '==========================']
  if (filters.length) lines.push(c.dim(`(${filters.join(', ')})`))
  lines.push('', `Total contexts: ${n(r.total)}`)
  for (const [location, count] of Object.entries(r.by_location)) lines.push(`  - ${cap(location)}: ${n(count)}`)
  const statuses = Object.entries(r.by_status)
  if (statuses.length) lines.push(`  By status: ${statuses.map(([s, k]) => `${s} ${n(k)}`).join(', ')}`)
  const d = r.disk
  const saved = d.completed_before_gzip > d.completed ? ` (${formatBytes(d.completed_before_gzip)} before compression)` : ''
  lines.push(
    '',
    'Disk usage:',
    `  - Running: ${formatBytes(d.running)}`,
    `  - Paused: ${formatBytes(d.paused)}`,
    `  - Completed: ${formatBytes(d.completed)}${saved}`,
  )
  lines.push(
    '',
    'Average per task:',
    `  - Messages: ${n(r.averages.messages)}`,
    `  - Tokens: ${n(r.averages.tokens)}`,
    `  - Duration: ${r.averages.duration_ms === null ? '-' : formatDuration(r.averages.duration_ms)}`,
    `  - Compressions: ${r.averages.compressions}`,
  )
  if (r.tokens) lines.push('', `Tokens: ${tokenLine(r.tokens)}`)
  if (r.spend) lines.push(...spendLines(ctx, r.spend))
  if (r.by_user.length) {
    lines.push('', 'By user:')
    lines.push(
      table(
        ctx.io,
        ['user', 'tasks', 'share', 'tokens', 'avg duration'],
        r.by_user.map((u) => [
          u.user ?? '(none)',
          n(u.tasks),
          `${(u.share * 100).toFixed(0)}%`,
          n(u.tokens),
          u.average_duration_ms === null ? '-' : formatDuration(u.average_duration_ms),
        ]),
      ),
    )
  }
  return lines.join('\n')
}

/** `12,000 (prompt 10,000, of which cached 2,000; completion 2,000) · $0.0450`: what operators compare with ccusage. */
export function tokenLine(t: TokenReport): string {
  const n = grouped
  const parts = [
    `prompt ${n(t.prompt)}${t.cached ? `, of which cached ${n(t.cached)}` : ''}${t.cache_write ? `${t.cached ? ' and' : ', of which'} written to the cache ${n(t.cache_write)}` : ''}`,
    `completion ${n(t.completion)}`,
  ]
  if (t.unsplit) parts.push(`not split ${n(t.unsplit)}`)
  const cost = t.cost_usd === null ? '' : ` · $${t.cost_usd.toFixed(4)}${t.unpriced_tasks ? ` (${t.unpriced_tasks} task(s) of a model without a price)` : ''}`
  return `${n(t.total)} (${parts.join('; ')})${cost}`
}

function cap(s: string): string {
  return s.charAt(0).toUpperCase() + s.slice(1)
}

/** Counting from the directories: the ones that could not be read are named, not silently left out. */
function uncountedWarning(unreadable: { uuid: string; error: string }[]): string {
  const shown = sampleOf(
    unreadable.map((u) => `${u.uuid.slice(0, 8)} (${clip(u.error, 120)})`),
    2,
  )
  return `${unreadable.length} task director${unreadable.length === 1 ? 'y' : 'ies'} could not be read and ${unreadable.length === 1 ? 'is' : 'are'} not counted: ${shown} (ctxagent reindex lists them all)`
}
