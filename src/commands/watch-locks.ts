import { Command, InvalidArgumentError } from 'commander'
import type { CommandEnv } from '../command-env.js'
import { auditTask, fleetDatabaseUrl, withTaskEnv } from '../command-env.js'
import { fleetReapPass } from '../actions/fleet-db.js'
import type { FleetPassOptions } from '../actions/fleet-db.js'
import { formatDuration } from '../duration.js'
import { LockedError, NotFoundError } from '../errors.js'
import { shortPath } from '../text.js'
import { table } from '../render.js'
import { acquireMonitorLock, monitorPass } from '../operations/monitor.js'
import { killedText, oneHostRecovery } from '../operations/reaper.js'
import type { Finding, PassResult } from '../operations/monitor.js'
import { stalenessPolicy } from '../storage/task/env.js'
import type { TaskEnv } from '../storage/task/env.js'
import { durationArg, pause, stopSignal, withEnv } from '../command-kit/shared.js'
import { MAX_TIMER_MS } from '../run/stop.js'
import { spawn } from 'node:child_process'
import { dueResumes } from '../operations/auto-resume.js'
import type { DueResume } from '../operations/auto-resume.js'
import { BudgetSpentError, firstPromptTokens, refuseSpentBudget } from '../run/budget-start.js'
import { safeState } from '../storage/task/lifecycle.js'
import { readMetadata } from '../storage/task/metadata.js'
import { printSettled } from '../command-kit/settled.js'

interface WatchOptions {
  once?: boolean
  interval?: number
  staleAfter?: number
}

export function watchLocksCommand(): Command {
  return new Command('watch-locks')
    .description(
      'find agents that died (stale heartbeat, process gone) and recover their tasks: paused/ to be resumed (recovery: resume, the default), or failed in completed/ (recovery: fail); run --resume continues either',
    )
    .option('--once', 'one pass, then exit (for cron or a systemd timer)')
    .option(
      '--interval <duration>',
      'time between passes, at least 1s (default: 5m); with --once in a fleet, how often cron runs it (refused the pass lease for longer: exit 1)',
      atLeastOneSecond,
    )
    .option(
      '--stale-after <duration>',
      'heartbeat age after which a dead owner is reaped (default: config locks.stale_after_seconds)',
      durationArg('--stale-after'),
    )
    .action(withEnv(watchLocks))
}

async function watchLocks(ctx: CommandEnv, opts: WatchOptions): Promise<void> {
  if (!ctx.layout.exists()) {
    // A cron job with a typo in --home must not look healthy: exit 3, as stats.
    if (opts.once) throw new NotFoundError(`there is no task tree at ${shortPath(ctx.layout.base)}`, 'check --home, CTXAGENT_HOME or context.base_dir')
    ctx.io.warn(`no task tree at ${ctx.layout.base} yet; nothing to watch (check --home / CTXAGENT_HOME)`)
    // A monitor started before any agent: it waits for the tree, and creates nothing meanwhile.
    if (!(await waitForTree(ctx, opts.interval ?? DEFAULT_INTERVAL_MS))) {
      if (!ctx.json) ctx.io.err('watch-locks: stopped\n')
      return
    }
  }
  await withTaskEnv(ctx, async (env) => {
    const policy = stalenessPolicy(ctx.config, opts.staleAfter)
    const monitor = await acquireMonitorLock(env, policy)
    if (monitor === null) {
      if (opts.once) {
        ctx.io.warn('another watch-locks is running; this pass was skipped')
        return
      }
      throw new LockedError('another watch-locks is already running', 'stop it first, or use --once from cron')
    }
    const heartbeat = setInterval(() => void monitor.heartbeat().catch(() => undefined), ctx.config.locks.heartbeat_seconds * 1000)
    try {
      if (opts.once) {
        report(ctx, await pass(ctx, env, policy, { intervalMs: opts.interval ?? DEFAULT_INTERVAL_MS, once: true }))
        return
      }
      await loop(ctx, opts.interval ?? DEFAULT_INTERVAL_MS, async () =>
        report(ctx, await pass(ctx, env, policy, { intervalMs: opts.interval ?? DEFAULT_INTERVAL_MS, once: false })),
      )
    } finally {
      clearInterval(heartbeat)
      await monitor.release()
    }
  })
}

function atLeastOneSecond(value: string): number {
  const ms = durationArg('--interval')(value)
  if (ms < 1000) throw new InvalidArgumentError('must be at least 1s (a shorter interval only spins)')
  if (ms > MAX_TIMER_MS) throw new InvalidArgumentError('must be at most 24d (run watch-locks --once from cron for longer gaps)')
  return ms
}

type Pass = PassResult & { jobs_recovered?: number; resumed?: StartedResume[] }

async function pass(ctx: CommandEnv, env: TaskEnv, policy: ReturnType<typeof stalenessPolicy>, fleet: FleetPassOptions): Promise<Pass> {
  const chat = { hardTimeoutMs: ctx.config.chat.hard_timeout_minutes * 60_000, graceMs: ctx.config.chat.end_grace_seconds * 1000 }
  const options = {
    policy,
    longRunningMs: ctx.config.alerts.long_running_hours * 3_600_000,
    noProgressMs: ctx.config.alerts.no_progress_minutes * 60_000,
    chat,
  }
  const oneHost = fleetDatabaseUrl(ctx) === null
  const result: Pass = oneHost
    ? await monitorPass(env, { ...options, ...oneHostRecovery(ctx.config.fleet.recovery) })
    : printSettled(ctx, await fleetReapPass(ctx, env, options, fleet))
  for (const f of result.findings) if (f.action !== 'alert') auditTask(ctx, 'watch-locks', f.uuid)
  // On one host, tasks paused until a usage limit lifted or a budget window reset go on (a fleet's jobs wait in the queue instead).
  if (oneHost) {
    result.resumed = await startResumes(ctx, env)
    for (const r of result.resumed) auditTask(ctx, 'watch-locks', r.uuid)
  }
  return result
}

interface StartedResume extends DueResume {
  action: 'resume_started'
  pid: number | null
}

/**
 * Starts `run --resume` of each paused task whose pause has ended (dueResumes), detached
 * (it outlives this pass), as this very program with the same tree and config: the run
 * applies the task's own user's settings (users.<name>) as any resume does. A run that
 * finds the task taken meanwhile exits 4 and changes nothing.
 */
async function startResumes(ctx: CommandEnv, env: TaskEnv): Promise<StartedResume[]> {
  const started: StartedResume[] = []
  const { CTXAGENT_NOW: _pinned, ...childEnv } = process.env
  for (const due of dueResumes(env)) {
    if (due.reason === 'budget' && (await budgetStillSpent(ctx, env, due.uuid))) continue
    const args = [
      ...process.execArgv,
      process.argv[1] as string,
      'run',
      '--resume',
      due.uuid,
      '--home',
      ctx.layout.base,
      ...(ctx.configSource !== null ? ['--config', ctx.configSource] : []),
    ]
    try {
      const child = spawn(process.execPath, args, { detached: true, stdio: 'ignore', env: childEnv })
      child.on('error', (err) => ctx.io.warn(`task ${due.uuid}: its resume did not start (${err.message})`))
      child.unref()
      started.push({ ...due, action: 'resume_started', pid: child.pid ?? null })
    } catch (err) {
      ctx.io.warn(`task ${due.uuid}: its resume did not start (${(err as Error).message})`)
    }
  }
  return started
}

/**
 * A task paused by a user's or the fleet's cost cap whose window has reset, but which a
 * cap still stops (another window: a month's cap after the day's; spend meanwhile): its
 * `run --resume` would be refused (exit 5) and change nothing, so every pass would start
 * it again. It is left paused; a pass after that cap's reset (or a raised cap) resumes it.
 */
async function budgetStillSpent(ctx: CommandEnv, env: TaskEnv, uuid: string): Promise<boolean> {
  try {
    const dir = env.layout.taskDir('paused', uuid)
    const meta = readMetadata(dir)
    const state = safeState(dir)
    await refuseSpentBudget(
      env.index,
      ctx.config,
      {
        user: meta.user ?? ctx.osUser,
        model: meta.config.model,
        state,
        uuid,
        maxCostUsd: null,
        promptTokens: state === null ? 0 : firstPromptTokens({ state }),
      },
      env.now(),
    )
    return false
  } catch (err) {
    // Unreadable metadata: the resume itself says what is wrong.
    return err instanceof BudgetSpentError
  }
}

const DEFAULT_INTERVAL_MS = 5 * 60_000

/** Looks for the tree every interval (at most every 5 s) until it exists (true) or SIGINT/SIGTERM (false). */
async function waitForTree(ctx: CommandEnv, intervalMs: number): Promise<boolean> {
  const { stopped, dispose } = stopSignal()
  try {
    while (!ctx.layout.exists()) if (!(await pause(Math.min(intervalMs, 5_000), stopped))) return false
    return true
  } finally {
    dispose()
  }
}

/** Repeats `body` every `intervalMs` until SIGINT or SIGTERM. */
async function loop(ctx: CommandEnv, intervalMs: number, body: () => Promise<void>): Promise<void> {
  const { stopped, dispose } = stopSignal()
  try {
    do await body()
    while (await pause(intervalMs, stopped))
  } finally {
    dispose()
    if (!ctx.json) ctx.io.err('watch-locks: stopped\n')
  }
}

function report(ctx: CommandEnv, result: Pass): void {
  const acted = result.findings.filter((f) => f.action === 'reaped' || f.action === 'finished').length
  const chats = result.findings.filter((f) => f.action === 'end_requested' || f.action === 'terminated').length
  const alerts = result.findings.length - acted - chats
  const resumed = result.resumed ?? []
  if (ctx.json) {
    for (const f of result.findings) ctx.io.jsonl(f)
    for (const r of resumed) ctx.io.jsonl(r)
    // One summary per pass, findings or not: a cron log tells "ran, found nothing" from "did not run".
    ctx.io.jsonl({
      pass: {
        ts: ctx.now().toISOString(),
        checked: result.checked,
        recovered: acted,
        alerts,
        chat_sessions: chats,
        reindexed: result.reindexed,
        ...(result.jobs_recovered !== undefined ? { jobs_recovered: result.jobs_recovered } : {}),
        ...(result.resumed !== undefined ? { resumed: resumed.length } : {}),
      },
    })
    return
  }
  ctx.io.out(
    `${ctx.now().toISOString()} watch-locks: ${result.checked} running task(s) checked, ${acted} recovered, ${alerts} alert(s)${chats ? `, ${chats} chat session(s) past the hard timeout` : ''}${result.reindexed ? `, ${result.reindexed} index row(s) brought in step with the directories` : ''}`,
  )
  for (const r of resumed)
    ctx.io.out(
      `task ${r.uuid}: its ${r.reason === 'rate-limit' ? 'usage limit lifted' : 'budget window reset'} at ${r.resume_at}; run --resume started (pid ${r.pid ?? '?'})`,
    )
  if (result.findings.length === 0) return
  ctx.io.out(
    table(
      ctx.io,
      ['uuid', 'action', 'pid', 'host', 'last heartbeat', 'reason'],
      result.findings.map((f) => row(ctx, f)),
    ),
  )
}

function row(ctx: CommandEnv, f: Finding): string[] {
  const action = f.action === 'reaped' || f.action === 'finished' ? ctx.io.chalk.red(f.action) : ctx.io.chalk.yellow(f.action)
  const beat = f.heartbeat_at ? `${f.heartbeat_at} (${formatDuration(ctx.now().getTime() - Date.parse(f.heartbeat_at))} ago)` : '-'
  return [
    f.uuid,
    action,
    f.pid === null ? '-' : String(f.pid),
    f.hostname ?? '-',
    beat,
    f.reason + ('killed_commands' in f ? killedText(f.killed_commands) : ''),
  ]
}
