import { existsSync } from 'node:fs'
import { join } from 'node:path'
import { formatDuration } from '../duration.js'
import { CtxError, isErrno, LockedError } from '../errors.js'
import { isTreeWide } from '../system-errors.js'
import { makePrivateDir, removeDeadTemps } from '../storage/fs/files.js'
import { FILES } from '../storage/fs/layout.js'
import type { TaskRef } from '../storage/fs/layout.js'
import { TaskLock } from '../storage/lock/lock.js'
import { UNREADABLE_LOCK } from '../storage/lock/staleness.js'
import type { LockInfo } from '../storage/lock/record.js'
import type { StalenessPolicy } from '../storage/lock/staleness.js'
import { assessTask, clearLeftoverLock, reapTask } from './reaper.js'
import { finishCompleting, safeState } from '../storage/task/lifecycle.js'
import type { ReapReport } from './reaper.js'
import { appendInbox, readInbox } from '../storage/task/inbox.js'
import { hostname } from '../storage/fs/process-info.js'
import { reconcileIndex } from './reindex.js'
import { readState } from '../storage/task/state.js'
import type { TaskEnv } from '../storage/task/env.js'
import { listTasks } from '../storage/task/scan.js'

export interface Alert {
  uuid: string
  action: 'alert'
  reason: string
  pid: number | null
  hostname: string | null
  heartbeat_at: string | null
  /** A no-progress alert: when the owner last made progress. */
  progress_at?: string
}

/** watch-locks acting on a chat session past its hard timeout (docs/contract.md §6). */
export interface Intervention {
  uuid: string
  action: 'end_requested' | 'terminated'
  reason: string
  pid: number | null
  hostname: string | null
  heartbeat_at: string | null
}

export type Finding = ReapReport | Alert | Intervention

export interface PassResult {
  checked: number
  findings: Finding[]
  /** tasks.db rows brought back in step with the directories. */
  reindexed: number
}

export interface PassOptions {
  policy: StalenessPolicy
  longRunningMs: number
  /** A live owner whose last progress is older than this is reported (never reaped); absent: not checked. */
  noProgressMs?: number
  /** Chat sessions idle this long are asked to end; still alive `graceMs` after the request, their owner gets SIGTERM. */
  chat?: { hardTimeoutMs: number; graceMs: number }
  /** Only report what would be done (cleanup --dry-run). */
  dryRun?: boolean
  /** A fleet's recovery choice per task (reaper.ts). */
  recoverAs?: (uuid: string) => 'paused' | 'failed'
}

/**
 * One pass of watch-locks over running/: reap every task whose owner is provably
 * dead, alert on tasks running longer than `longRunningMs`, and finish tasks that
 * died between their move to completed/ and their final status.
 */
export async function monitorPass(env: TaskEnv, options: PassOptions): Promise<PassResult> {
  const findings: Finding[] = []
  // Lock temps of processes killed while taking a lock live beside the task directories.
  if (!options.dryRun) for (const dir of [env.layout.base, env.layout.dir('running'), env.layout.dir('paused')]) removeDeadTemps(dir)
  const running = listTasks(env.layout, ['running'])
  for (const ref of running) {
    if (options.dryRun) {
      const a = assessTask(env, ref, { policy: options.policy })
      // A task whose dead owner had answered would be completed, not failed (see reapTask).
      const answered = a.stale && typeof safeState(ref.dir)?.final_answer === 'string'
      if (a.stale)
        findings.push({
          uuid: ref.uuid,
          action: answered ? 'finished' : 'reaped',
          reason: answered ? `the agent died after answering (${a.verdict.reason}); would complete it with its answer` : a.verdict.reason,
          pid: a.holder?.process_id ?? null,
          hostname: a.holder?.hostname ?? null,
          heartbeat_at: a.holder?.heartbeat_at ?? null,
        })
      continue
    }
    let outcome
    try {
      outcome = await reapTask(env, ref, { policy: options.policy, ...(options.recoverAs ? { recoverAs: options.recoverAs } : {}) })
    } catch (err) {
      // One unreadable or vanishing task must not stop the pass for all the others;
      // a full disk or a read-only mount is not one task's problem: every other would fail the same way.
      if (isTreeWide(err, env.layout.base)) throw err
      env.warn(`task ${ref.uuid}: ${(err as Error).message}`)
      continue
    }
    if (outcome.done) {
      findings.push(outcome.report)
      continue
    }
    if (outcome.reason === UNREADABLE_LOCK) {
      findings.push({
        uuid: ref.uuid,
        action: 'alert',
        reason: `its .lock is not a lock record (damaged, or not a file), so it counts as held: if no agent runs this task, ctxagent unlock ${ref.uuid} --force recovers it`,
        pid: null,
        hostname: null,
        heartbeat_at: null,
      })
    }
    const alert = longRunning(env, ref, options.longRunningMs, outcome.holder)
    if (alert) findings.push(alert)
    const stalled = options.noProgressMs === undefined ? null : noProgress(env, ref, options.noProgressMs, outcome.holder)
    if (stalled) findings.push(stalled)
    const intervention = options.chat ? enforceChatTimeout(env, ref, options.chat, outcome.holder) : null
    if (intervention) findings.push(intervention)
  }
  // A lock left in paused/ by a process that died holding it (a resume, a compress): nobody may hold a paused task.
  for (const ref of options.dryRun ? [] : listTasks(env.layout, ['paused'])) {
    if (!existsSync(join(ref.dir, FILES.lock))) continue
    try {
      const outcome = await clearLeftoverLock(env, ref, { policy: options.policy })
      if (outcome.done) findings.push(outcome.report)
    } catch (err) {
      if (isTreeWide(err, env.layout.base)) throw err
      if (!(err instanceof LockedError) && !isErrno(err, 'ENOENT')) env.warn(`task ${ref.uuid}: ${(err as Error).message}`)
    }
  }
  for (const ref of options.dryRun ? [] : await completingInIndex(env)) {
    if ((await finishCompleting(env, ref)) !== null) {
      findings.push({ uuid: ref.uuid, action: 'finished', reason: 'completion was interrupted after the move', pid: null, hostname: null, heartbeat_at: null })
    }
  }
  // After the moves, so that this pass's own rows are in; a crashed mover's are mended here.
  const reindexed = options.dryRun
    ? 0
    : await reconcileIndex(env).catch((err: Error) => {
        if (isTreeWide(err, env.layout.base)) throw err
        env.warn(`${env.index?.name ?? 'the index'} not brought in step with the directories: ${err.message} (ctxagent reindex rebuilds it)`)
        return 0
      })
  return { checked: running.length, findings, reindexed }
}

/**
 * The chat hard timeout (docs/contract.md §6): a session idle past it gets a control `end`
 * request in its inbox; if its owner is still alive `graceMs` later (it ignores the
 * inbox, or hangs), and runs on this host, it gets SIGTERM, which pauses the task.
 */
function enforceChatTimeout(env: TaskEnv, ref: TaskRef, chat: { hardTimeoutMs: number; graceMs: number }, holder: LockInfo | null): Intervention | null {
  // Every chat session has an inbox (its start marker is the first record): one stat spares reading state.json of every other task.
  if (!existsSync(join(ref.dir, FILES.inbox))) return null
  let state
  try {
    state = readState(ref.dir)
  } catch {
    return null
  }
  const session = state?.session
  if (!session || session.state === 'ended') return null
  const idle = env.now().getTime() - Date.parse(session.last_activity_at)
  if (!(idle > chat.hardTimeoutMs)) return null
  const base = { uuid: ref.uuid, pid: holder?.process_id ?? null, hostname: holder?.hostname ?? null, heartbeat_at: holder?.heartbeat_at ?? null }
  const minutes = `${Math.round(idle / 60_000)} min idle (hard timeout ${Math.round(chat.hardTimeoutMs / 60_000)} min)`
  const asked = readInbox(ref.dir, 0).records.find((r) => r.kind === 'control' && r.action === 'end' && r.sender === MONITOR)
  if (asked === undefined) {
    appendInbox(ref.dir, { kind: 'control', action: 'end', sender: MONITOR }, env.now())
    return { ...base, action: 'end_requested', reason: `chat session ${minutes}: asked its agent to end it` }
  }
  const waited = env.now().getTime() - Date.parse(asked.created_at)
  if (waited < chat.graceMs || holder === null || holder.hostname !== hostname()) return null
  try {
    process.kill(holder.process_id, 'SIGTERM')
  } catch {
    return null
  }
  return { ...base, action: 'terminated', reason: `chat session ${minutes}; its agent ignored the end request for ${Math.round(waited / 1000)}s: sent SIGTERM` }
}

const MONITOR = 'watch-locks'

/**
 * A task counts as running since its owner took the lock (`acquired_at`): a task
 * resumed an hour ago after a week in paused/ has been running for an hour. Only a
 * task without a readable lock falls back to state.json's started_at.
 */
function longRunning(env: TaskEnv, ref: TaskRef, limitMs: number, holder: LockInfo | null): Alert | null {
  let started = Date.parse(holder?.acquired_at ?? '')
  if (Number.isNaN(started)) {
    try {
      started = Date.parse(readState(ref.dir)?.started_at ?? '')
    } catch (err) {
      if (err instanceof CtxError) return null
      throw err
    }
  }
  if (Number.isNaN(started)) return null
  const age = env.now().getTime() - started
  if (age <= limitMs) return null
  return {
    uuid: ref.uuid,
    action: 'alert',
    reason: `running for ${(age / 3_600_000).toFixed(1)}h (limit ${(limitMs / 3_600_000).toFixed(1)}h)`,
    pid: holder?.process_id ?? null,
    hostname: holder?.hostname ?? null,
    heartbeat_at: holder?.heartbeat_at ?? null,
  }
}

/**
 * An owner alive (its heartbeat fresh) that has made no progress for longer than
 * `limitMs`: wedged in a wait that nothing ends. Reported, never reaped: it is alive.
 */
function noProgress(env: TaskEnv, ref: TaskRef, limitMs: number, holder: LockInfo | null): Alert | null {
  const at = Date.parse(holder?.progress_at ?? '')
  if (holder === null || Number.isNaN(at)) return null
  const idle = env.now().getTime() - at
  if (idle <= limitMs) return null
  return {
    uuid: ref.uuid,
    action: 'alert',
    reason: `no progress for ${formatDuration(idle)} (limit ${formatDuration(limitMs)}) though pid ${holder.process_id} is alive: it may be wedged; ctxagent pause ${ref.uuid.slice(0, 8)}, or stop that process`,
    pid: holder.process_id,
    hostname: holder.hostname,
    heartbeat_at: holder.heartbeat_at,
    progress_at: holder.progress_at as string,
  }
}

async function completingInIndex(env: TaskEnv): Promise<TaskRef[]> {
  if (env.index === null) return []
  let uuids: string[]
  try {
    uuids = await env.index.uuidsWithStatus('completing')
  } catch (err) {
    // An index that cannot be read (PostgreSQL away) holds up only this repair, not the pass.
    env.warn(`interrupted completions not looked up in ${env.index.name}: ${(err as Error).message}`)
    return []
  }
  return uuids.map((uuid) => ({ uuid, location: 'completed' as const, dir: env.layout.taskDir('completed', uuid) }))
}

/**
 * watch-locks' own singleton lock (<base>/.watch-locks/.lock), so that two
 * monitors never work at once. Returns null when a live monitor holds it.
 */
export async function acquireMonitorLock(env: TaskEnv, policy: StalenessPolicy): Promise<TaskLock | null> {
  const dir = join(env.layout.base, '.watch-locks')
  makePrivateDir(dir)
  try {
    return await TaskLock.acquire(dir, { ...policy, now: env.now })
  } catch (err) {
    if (err instanceof LockedError) return null
    throw err
  }
}
