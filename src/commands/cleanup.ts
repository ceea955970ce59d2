import { listEntries, planCacheCleanup, removeEntry } from '../workspace/environment/cache-cleanup.js'
import { environmentStore } from '../workspace/environment/prepare.js'
import { Command } from 'commander'
import type { CommandEnv } from '../command-env.js'
import { auditTask, fleetDatabaseUrl, withTaskEnv } from '../command-env.js'
import { fleetPool, fleetReapPass, withFleetLease } from '../actions/fleet-db.js'
import { workerLiveSeconds } from '../storage/index/worker-liveness.js'
import { printSettled } from '../command-kit/settled.js'
import { formatBytes } from '../duration.js'
import { CtxError, NotFoundError, UsageError } from '../errors.js'
import { createProgress } from '../progress.js'
import { table } from '../render.js'
import { clip, sampleOf, shortPath } from '../text.js'
import { straysWarning } from '../storage/fs/layout.js'
import { monitorPass } from '../operations/monitor.js'
import { oneHostRecovery } from '../operations/reaper.js'
import type { Finding } from '../operations/monitor.js'
import { executeCleanup, expireRows, planCleanup } from '../operations/retention.js'
import type { CleanupPlan, PlannedTask } from '../operations/retention.js'
import { stalenessPolicy } from '../storage/task/env.js'
import { durationArg, stopSignal, withEnv } from '../command-kit/shared.js'
import type { StartsFrom } from '../storage/task/metadata.js'
import { removeTaskTree, taskTreeOf } from '../workspace/task-tree.js'

interface CleanupOptions {
  dryRun?: boolean
  compressAfter?: number
  deleteAfter?: number
  schedule?: string
}

export interface CleanupReport {
  compressed: (PlannedTask & { bytes_after: number | null })[]
  deleted: PlannedTask[]
  reaped: Finding[]
  skipped: { uuid: string; reason: string }[]
  undated: CleanupPlan['undated']
  /** Tasks that could not be read, or whose gzip or deletion failed: left for an operator. */
  failed: { uuid: string; error: string }[]
  /** Temp files of dead processes in task directories (removed, or would be). */
  litter: number
  bytes_before: number
  bytes_after: number | null
  dry_run: boolean
  /** In a fleet: finished job rows and dead worker rows past fleet.retention_days, deleted (or that would be). */
  fleet_rows?: { jobs: number; workers: number }
  /** The environments' cache (docs/environments.md#the-cache): results removed (or that would be) by age or size, and their bytes. */
  environment_cache?: { removed: number; bytes: number }
}

export function cleanupCommand(): Command {
  return new Command('cleanup')
    .description('retention: gzip old completed tasks, delete expired ones, reap stale locks')
    .option('--dry-run', 'print the plan and change nothing')
    .option(
      '--compress-after <duration>',
      'gzip completed tasks older than this (default: config context.retention.compress_after_days)',
      durationArg('--compress-after', { zero: true }),
    )
    .option(
      '--delete-after <duration>',
      'delete completed tasks older than this (default: config context.retention.delete_after_days)',
      durationArg('--delete-after', { zero: true }),
    )
    .option('--schedule <cron>', 'stay running and clean up on this cron schedule, e.g. "0 3 * * *" (runs never overlap)')
    .action(withEnv(cleanup))
}

async function cleanup(ctx: CommandEnv, opts: CleanupOptions): Promise<void> {
  const retention = ctx.config.context.retention
  const compressAfterMs = opts.compressAfter ?? retention.compress_after_days * 86_400_000
  const deleteAfterMs = opts.deleteAfter ?? retention.delete_after_days * 86_400_000
  if (opts.schedule === undefined) {
    // A cron job with a typo in --home must not look healthy: exit 3, as stats.
    if (!ctx.layout.exists())
      throw new NotFoundError(`there is no task tree at ${shortPath(ctx.layout.base)}`, 'check --home, CTXAGENT_HOME or context.base_dir')
    await runOnce(ctx, opts, compressAfterMs, deleteAfterMs)
    return
  }
  const { default: cron } = await import('node-cron')
  if (!cron.validate(opts.schedule) || hasReversedRange(opts.schedule))
    throw new UsageError(`--schedule: '${opts.schedule}' is not a cron expression`, 'use five fields, e.g. "0 3 * * *" for 03:00 every day')
  ctx.io.err(`cleanup: scheduled "${opts.schedule}"; Ctrl-C to stop\n`)
  const task = cron.schedule(
    opts.schedule,
    () => runOnce(ctx, opts, compressAfterMs, deleteAfterMs).catch((err: Error) => ctx.io.warn(`cleanup run failed: ${err.message}`)),
    { noOverlap: true },
  )
  task.on('execution:overlap', () => ctx.io.warn('the previous cleanup is still running; this run is skipped'))
  const { stopped, dispose } = stopSignal()
  await stopped
  dispose()
  await task.destroy()
}

async function runOnce(ctx: CommandEnv, opts: CleanupOptions, compressAfterMs: number, deleteAfterMs: number): Promise<void> {
  // In a fleet, cleanup passes never overlap fleet-wide (docs/contract.md §14.3).
  if (fleetDatabaseUrl(ctx) !== null && opts.dryRun !== true) {
    await withFleetLease(ctx, 'cleanup', fleetPassOptions(opts), () => cleanupOnce(ctx, opts, compressAfterMs, deleteAfterMs))
    return
  }
  await cleanupOnce(ctx, opts, compressAfterMs, deleteAfterMs)
}

async function cleanupOnce(ctx: CommandEnv, opts: CleanupOptions, compressAfterMs: number, deleteAfterMs: number): Promise<void> {
  if (!ctx.layout.exists()) {
    ctx.io.warn(`no task tree at ${ctx.layout.base}; nothing to clean up`)
    return
  }
  const dryRun = opts.dryRun === true
  await withTaskEnv(
    ctx,
    async (env) => {
      const policy = stalenessPolicy(ctx.config)
      const options = { policy, longRunningMs: Number.POSITIVE_INFINITY, dryRun }
      // In a fleet, a dead worker's task is recovered as watch-locks would (fleet.recovery).
      const pass =
        fleetDatabaseUrl(ctx) !== null && !dryRun
          ? printSettled(ctx, await fleetReapPass(ctx, env, options, fleetPassOptions(opts)))
          : await monitorPass(env, { ...options, ...oneHostRecovery(ctx.config.fleet.recovery) })
      const reaped = pass.findings.filter((f) => f.action !== 'alert')
      const plan = planCleanup(env, { compressAfterMs, deleteAfterMs, lockPolicy: policy })
      const before = [...plan.compress, ...plan.delete].reduce((sum, t) => sum + t.bytes, 0)
      let report: CleanupReport
      if (dryRun) {
        report = {
          compressed: plan.compress.map((t) => ({ ...t, bytes_after: null })),
          deleted: plan.delete,
          reaped,
          skipped: plan.skipped,
          undated: plan.undated,
          failed: plan.unreadable,
          litter: plan.litter.length,
          bytes_before: before,
          bytes_after: null,
          dry_run: true,
        }
      } else {
        const files = plan.compress.reduce((n, t) => n + (t.files?.length ?? 0), 0) + plan.delete.length
        const progress = createProgress(ctx.io, 'cleanup', !ctx.json)
        progress.start(files)
        // A deleted task's worktree (docs/delivery.md#what-a-task-starts-from) goes with it: read before its files go.
        const trees = new Map(plan.delete.map((t) => [t.uuid, taskTreeOf(env.layout.taskDir('completed', t.uuid))]))
        const done = await executeCleanup(env, plan, () => progress.tick()).finally(() => progress.stop())
        for (const t of done.deleted) removeTreeOf(ctx, t.uuid, trees.get(t.uuid))
        for (const t of [...done.compressed, ...done.deleted, ...reaped]) auditTask(ctx, 'cleanup', t.uuid)
        const after = done.compressed.reduce((sum, t) => sum + t.bytes_after, 0)
        report = {
          compressed: done.compressed,
          deleted: done.deleted,
          reaped,
          skipped: plan.skipped,
          undated: plan.undated,
          failed: [...plan.unreadable, ...done.failed],
          litter: done.litter_removed,
          bytes_before: before,
          bytes_after: after,
          dry_run: false,
        }
      }
      if (fleetDatabaseUrl(ctx) !== null) report.fleet_rows = await expireFleetRows(ctx, dryRun)
      report.environment_cache = cleanEnvironmentCache(ctx, dryRun)
      if (ctx.json) ctx.io.json(report)
      else ctx.io.out(render(ctx, report))
      if (plan.undated.length > 0) ctx.io.warn(undatedWarning(plan.undated))
      const strays = straysWarning(ctx.layout)
      if (strays) ctx.io.warn(strays)
      if (report.failed.length > 0) throw failedError(report.failed)
    },
    { createIndex: !dryRun },
  )
}

/** A deleted task's worktree removed; one that cannot be is said, and the pass goes on. */
function removeTreeOf(ctx: CommandEnv, uuid: string, from: StartsFrom | undefined): void {
  try {
    removeTaskTree(from)
  } catch (err) {
    ctx.io.warn(`task ${uuid.slice(0, 8)}: its worktree ${from?.worktree} was not removed (${(err as Error).message})`)
  }
}

/** The environments' cache: results unused past environment_cache.max_age_days go, then the least recently used past max_gb. */
function cleanEnvironmentCache(ctx: CommandEnv, dryRun: boolean): { removed: number; bytes: number } {
  const { max_age_days: days, max_gb: gb } = ctx.config.environment_cache
  const plan = planCacheCleanup(listEntries(environmentStore(ctx.config, ctx.layout.base)), days * 86_400_000, gb * 1024 ** 3, ctx.now().getTime())
  if (!dryRun) for (const e of plan.remove) removeEntry(e.dir)
  return { removed: plan.remove.length, bytes: plan.remove.reduce((n, e) => n + e.bytes, 0) }
}

/** Cleanup's passes come about daily (retention counts days): a lease refused for longer than a day is an alert (docs/contract.md §14.5). */
function fleetPassOptions(opts: CleanupOptions): { intervalMs: number; once: boolean } {
  return { intervalMs: 86_400_000, once: opts.schedule === undefined }
}

/** Finished jobs and dead workers past fleet.retention_days (docs/contract.md §14.4): their rows go, as old tasks do. */
async function expireFleetRows(ctx: CommandEnv, dryRun: boolean): Promise<{ jobs: number; workers: number }> {
  const { pool } = await fleetPool(ctx, 'cleanup')
  try {
    return await expireRows(pool, ctx.config.fleet.retention_days, workerLiveSeconds(ctx.config.locks), dryRun)
  } finally {
    await pool.end().catch(() => undefined)
  }
}

/** A range that runs backwards (`5-1`): node-cron takes it, and it would never or oddly fire. */
function hasReversedRange(expression: string): boolean {
  return [...expression.matchAll(/(\d+)-(\d+)/g)].some((m) => Number(m[1]) > Number(m[2]))
}

/** The tasks cleanup could not read or finish, in one line (exit 1: the others were done). */
function failedError(failed: CleanupReport['failed']): CtxError {
  const shown = sampleOf(
    failed.map((f) => `${f.uuid.slice(0, 8)} (${clip(f.error, 150)})`),
    2,
  )
  return new CtxError(`${failed.length} task(s) in completed/ could not be cleaned up and were left as they were: ${shown}`, {
    exitCode: 1,
    hint: 'the other tasks were; fix these (--json lists all) and run cleanup again',
  })
}

/** One line for every task cleanup had to date by its files: they are not skipped, but somebody should look. */
function undatedWarning(undated: CleanupPlan['undated']): string {
  const shown = sampleOf(
    undated.map((u) => `${u.uuid.slice(0, 8)} (${u.reason})`),
    3,
  )
  return `${undated.length} task(s) in completed/ have no usable completed_at, so their age comes from their files' times: ${shown} (ctxagent view <uuid> shows them; --json lists all)`
}

function render(ctx: CommandEnv, r: CleanupReport): string {
  const verb = r.dry_run ? 'would' : ''
  const lines: string[] = []
  const rows: string[][] = [
    ...r.reaped.map((f) => [f.uuid, r.dry_run ? 'would reap' : 'reaped', '-', f.reason]),
    ...r.compressed.map((t) => [
      t.uuid,
      r.dry_run ? 'would gzip' : 'gzipped',
      `${t.age_days}d`,
      `${formatBytes(t.bytes)}${t.bytes_after === null ? '' : ` → ${formatBytes(t.bytes_after)}`} (${t.files?.length ?? 0} files)`,
    ]),
    ...r.deleted.map((t) => [t.uuid, r.dry_run ? 'would delete' : 'deleted', `${t.age_days}d`, formatBytes(t.bytes)]),
    ...r.skipped.map((s) => [s.uuid, 'skipped', '-', s.reason]),
  ]
  if (rows.length) lines.push(table(ctx.io, ['uuid', 'action', 'age', 'detail'], rows))
  const summary = `${r.dry_run ? 'dry run: ' : ''}${r.compressed.length} task(s) ${verb ? `${verb} be ` : ''}gzipped, ${r.deleted.length} ${verb ? `${verb} be ` : ''}deleted, ${r.reaped.length} stale lock(s) ${verb ? `${verb} be ` : ''}reaped`
  lines.push(r.litter > 0 ? `${summary}; ${r.litter} temp file(s) of dead processes ${r.dry_run ? 'would be ' : ''}removed` : summary)
  if (r.fleet_rows !== undefined)
    lines.push(
      `fleet: ${r.fleet_rows.jobs} finished job row(s) and ${r.fleet_rows.workers} dead worker row(s) past fleet.retention_days ${r.dry_run ? 'would be ' : ''}deleted`,
    )
  if (r.environment_cache !== undefined && r.environment_cache.removed > 0)
    lines.push(
      `environment cache: ${r.environment_cache.removed} result(s) (${formatBytes(r.environment_cache.bytes)}) past environment_cache.max_age_days or max_gb ${r.dry_run ? 'would be ' : ''}removed`,
    )
  if (r.bytes_after !== null)
    lines.push(`bytes: ${formatBytes(r.bytes_before)} → ${formatBytes(r.bytes_after)} (${formatBytes(r.bytes_before - r.bytes_after)} freed)`)
  else lines.push(`bytes affected: ${formatBytes(r.bytes_before)}; nothing was changed`)
  return lines.join('\n')
}
