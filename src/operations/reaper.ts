import { existsSync, renameSync, statSync } from 'node:fs'
import { pauseAtForTest } from '../test-pause.js'
import { join } from 'node:path'
import { isErrno, LockedError } from '../errors.js'
import { assertRegularFiles, removeDeadTemps } from '../storage/fs/files.js'
import { BLOB_DIR } from '../storage/fs/layout.js'
import { FILES, LOCATIONS, TASK_DATA_FILES } from '../storage/fs/layout.js'
import type { Location, TaskRef } from '../storage/fs/layout.js'
import { judgeLock } from '../storage/lock/staleness.js'
import { readLock } from '../storage/lock/record.js'
import { TaskLock } from '../storage/lock/lock.js'
import type { LockInfo } from '../storage/lock/record.js'
import type { StalenessPolicy, Verdict } from '../storage/lock/staleness.js'
import { readMetadata, writeMetadata } from '../storage/task/metadata.js'
import { updateState } from '../storage/task/state.js'
import type { TaskState } from '../storage/task/state.js'
import { refreshIndex, safeState } from '../storage/task/lifecycle.js'
import type { TaskEnv } from '../storage/task/env.js'

export type ReapAction = 'reaped' | 'finished'

/** What a reaper did to one task (one JSON line of `watch-locks --json`). */
export interface ReapReport {
  uuid: string
  action: ReapAction
  reason: string
  pid: number | null
  hostname: string | null
  heartbeat_at: string | null
  /** Process groups of commands the dead owner left running, killed on the way (absent when none). */
  killed_commands?: number[]
}

/**
 * `recovery` on one host (docs/running.md#recovery-on-one-host): resume (the default) pauses
 * a dead owner's task for `run --resume`; fail fails it (resumable all the same).
 */
export function oneHostRecovery(recovery: 'resume' | 'fail'): { recoverAs?: (uuid: string) => 'paused' | 'failed' } {
  return recovery === 'resume' ? { recoverAs: () => 'paused' } : {}
}

/** How a report says that a takeover killed the dead owner's commands ('' when none); `who` names the owner. */
export function killedText(groups: readonly number[] | undefined, who = 'it'): string {
  return groups && groups.length > 0 ? `; killed the command(s) ${who} left running (process group ${groups.join(', ')})` : ''
}

export type ReapOutcome = { done: true; report: ReapReport } | { done: false; reason: string; holder: LockInfo | null }

export interface ReapOptions {
  policy: StalenessPolicy
  /** Take the task even from a live holder (`unlock --force`). */
  force?: boolean
  /** A fleet's choice per task (docs/contract.md §14.3, fleet.recovery): 'paused' moves a dead owner's task to paused/ for a resume, instead of failing it. */
  recoverAs?: (uuid: string) => 'paused' | 'failed'
}

export type Assessment = { stale: true; verdict: Verdict; holder: LockInfo | null } | { stale: false; reason: string; holder: LockInfo | null }

/** Would reapTask act on this task now, and why? Reads only. */
export function assessTask(env: TaskEnv, ref: TaskRef, options: ReapOptions): Assessment {
  const lock = readLock(ref.dir)
  const holder: LockInfo | null = lock?.info ?? null
  if (lock !== null) {
    const verdict = judgeLock(lock, env.now(), options.policy)
    if (verdict.stale) return { stale: true, verdict, holder }
    if (options.force === true) return { stale: true, verdict: { stale: true, reason: `forced by operator while ${verdict.reason}` }, holder }
    return { stale: false, reason: verdict.reason, holder }
  }
  // No lock: an owner (or another reaper) between releasing it and moving the
  // directory, a task still being created, or a dead one. Only an old state.json
  // tells them apart, so nothing happens until stale_after has passed.
  const state = safeState(ref.dir)
  // No state.json yet: a task still being created, or one killed then; the directory's own time tells which.
  const updated = Date.parse(state?.updated_at ?? '')
  const since = Number.isNaN(updated) ? dirTime(ref.dir) : updated
  // Gone from running/ while we looked: its owner (or another process) moved it; nothing here to act on.
  if (since === null) return { stale: false, reason: 'it was moved out of running/ by another process just now', holder: null }
  const age = env.now().getTime() - since
  if (age <= options.policy.staleAfterMs && options.force !== true) {
    return { stale: false, reason: `no lock, but state.json was updated ${Math.round(age / 1000)}s ago`, holder: null }
  }
  const reason =
    state !== null && isSettled(state)
      ? `owner stopped before moving the task (status ${state.status})`
      : `no lock and no update for ${Math.round(age / 1000)}s`
  return { stale: true, verdict: { stale: true, reason }, holder: null }
}

/**
 * Recovers one task of running/ whose owner is provably dead: takes its lock (so no
 * other reaper or resuming process can act at the same time), records `failed` with
 * an error naming the dead pid, host and last heartbeat, and moves it to completed/.
 * A task whose owner stopped between releasing its lock and moving the directory
 * (status already final, or paused) is moved where it was going instead; one that died
 * after recording its final answer is completed with it.
 */
export async function reapTask(env: TaskEnv, ref: TaskRef, options: ReapOptions): Promise<ReapOutcome> {
  const assessment = assessTask(env, ref, options)
  if (!assessment.stale) return { done: false, reason: assessment.reason, holder: assessment.holder }
  // A task whose files are not all regular (a link, a FIFO planted in it) is refused before its lock is touched:
  // the dead owner's lock, and the commands it names, stay for an operator to look at.
  assertRegularFiles(ref.dir, TASK_DATA_FILES)
  const { verdict } = assessment
  // A reaper that died on this task left its own lock naming the owner it was recovering: that owner is the one to name.
  const recovering = assessment.holder?.reaping
  const reaper = recovering && typeof recovering.process_id === 'number' && typeof recovering.hostname === 'string' ? assessment.holder : null
  const holder: LockInfo | null = reaper?.reaping ? { ...reaper.reaping, acquired_at: reaper.reaping.heartbeat_at } : assessment.holder
  const reaping = holder ? { process_id: holder.process_id, hostname: holder.hostname, heartbeat_at: holder.heartbeat_at } : undefined

  let taken: TaskLock
  try {
    taken = await TaskLock.acquire(ref.dir, { ...options.policy, now: env.now, force: options.force === true, ...(reaping ? { reaping } : {}) })
  } catch (err) {
    // Another reaper, or a resuming owner, was first; or the task already moved on.
    if (err instanceof LockedError) return { done: false, reason: 'another process took the task first', holder }
    if (isErrno(err, 'ENOENT')) return { done: false, reason: 'the task left running/ meanwhile', holder }
    throw err
  }
  try {
    const now = env.now().toISOString()
    const current = safeState(ref.dir)
    const settled = current !== null && isSettled(current)
    // An owner that died after recording its final answer (during its final summary): the task is done, not failed.
    // One that died delivering (docs/delivery.md#a-crash-during-delivery) is resumed where recovery resumes, to deliver.
    const hasAnswer = !settled && typeof current?.final_answer === 'string'
    const delivering = hasAnswer && current?.delivery === undefined && deliveryAsked(ref.dir)
    const recover = !settled && (!hasAnswer || delivering) && options.force !== true && options.recoverAs?.(ref.uuid) === 'paused'
    const answered = hasAnswer && !recover
    const to: Location = (settled && current.status === 'paused') || recover ? 'paused' : 'completed'
    // A forced takeover says so: the agent may well have been alive.
    const forced = options.force === true && verdict.reason.startsWith('forced by operator')
    const unborn = completeUnbornTask(ref, holder, env.now())
    const killed = killedText(taken.stoppedCommands)
    const error = settled
      ? current.error
      : `${forced ? 'taken over by an operator (unlock --force) from' : unborn ? 'agent died while creating the task:' : 'agent died:'} ${holder ? `pid ${holder.process_id} on ${holder.hostname}, last heartbeat ${holder.heartbeat_at}` : 'no lock held'} (${reaper ? `a reaper, pid ${reaper.process_id}, died while recovering it; ${verdict.reason}` : verdict.reason})${killed}`
    const next = await updateState(
      ref.dir,
      (s) =>
        settled
          ? { completed_at: s.completed_at ?? (to === 'completed' ? now : null) }
          : answered
            ? { status: 'completed', completed_at: now, last_activity: 'completed by a reaper: the agent died after answering' }
            : recover
              ? { status: 'paused', paused_by: 'reaper' as const, error: `${error}; paused to be resumed`, last_activity: 'reaped' }
              : { status: 'failed', error, completed_at: now, last_activity: 'reaped' },
      env.now(),
    )
    await taken.release()
    await pauseAtForTest('reap:before-move')
    const target = env.layout.taskDir(to, ref.uuid)
    // The dead owner's half-written temp files are litter: they must not travel to completed/.
    removeDeadTemps(ref.dir)
    removeDeadTemps(join(ref.dir, BLOB_DIR))
    renameSync(ref.dir, target)
    const finalState = next.status === 'completing' ? await updateState(target, () => ({ status: 'completed' }), env.now()) : next
    await refreshIndex(env, { uuid: ref.uuid, location: to, dir: target }, finalState)
    return {
      done: true,
      report: {
        uuid: ref.uuid,
        action: settled || answered ? 'finished' : 'reaped',
        reason: answered ? `the agent died after answering (${verdict.reason}); completed with its answer${killed}` : verdict.reason,
        pid: holder?.process_id ?? null,
        hostname: holder?.hostname ?? null,
        heartbeat_at: holder?.heartbeat_at ?? null,
        ...(taken.stoppedCommands.length > 0 ? { killed_commands: taken.stoppedCommands } : {}),
      },
    }
  } catch (err) {
    if (isErrno(err, 'ENOENT')) {
      // The directory moved away with our lock inside it: take that lock back out.
      await releaseWherever(env, ref.uuid, taken)
      return { done: false, reason: 'the task left running/ meanwhile', holder }
    }
    await taken.release().catch(() => undefined)
    throw err
  }
}

async function releaseWherever(env: TaskEnv, uuid: string, lock: TaskLock): Promise<void> {
  for (const location of LOCATIONS) {
    const dir = env.layout.taskDir(location, uuid)
    if (readLock(dir)?.info?.token !== lock.token) continue
    lock.movedTo(dir)
    await lock.release().catch(() => undefined)
  }
}

function isSettled(state: TaskState): boolean {
  return state.status === 'paused' || state.status === 'completing' || state.status === 'completed' || state.status === 'failed' || state.status === 'timeout'
}

/** The directory's modification time, or null when it is gone. */
function dirTime(dir: string): number | null {
  try {
    return statSync(dir).mtimeMs
  } catch {
    return null
  }
}

/**
 * A task whose agent died between creating its directory and writing metadata.json
 * gets a placeholder, so that every command (and tasks.db) can still handle it.
 * Returns whether it had to.
 */
function completeUnbornTask(ref: TaskRef, holder: LockInfo | null, now: Date): boolean {
  if (existsSync(join(ref.dir, FILES.metadata))) return false
  writeMetadata(ref.dir, {
    uuid: ref.uuid,
    task_key: { task_source: 'unknown', owner: null, repo: '', task_type: 'unknown', task_id: '' },
    task_type: 'unknown',
    task_identifier: '',
    repository: '',
    user: null,
    created_at: now.toISOString(),
    process_id: holder?.process_id ?? 0,
    hostname: holder?.hostname ?? '',
    config: { llm_provider: 'unknown', model: 'unknown', context_length: 0, compression_threshold: 0 },
  })
  return true
}

/**
 * Removes a leftover `.lock` from a task outside running/ (a crash between taking
 * the lock and moving a paused task back), once its holder is provably dead.
 */
export async function clearLeftoverLock(env: TaskEnv, ref: TaskRef, options: ReapOptions): Promise<ReapOutcome> {
  const lock = readLock(ref.dir)
  if (lock === null) return { done: false, reason: 'the task holds no lock', holder: null }
  const verdict = judgeLock(lock, env.now(), options.policy)
  if (!verdict.stale && options.force !== true) return { done: false, reason: verdict.reason, holder: lock.info }
  const taken = await TaskLock.acquire(ref.dir, { ...options.policy, now: env.now, force: options.force === true })
  await taken.release()
  const info = lock.info
  return {
    done: true,
    report: {
      uuid: ref.uuid,
      action: 'finished',
      reason: `removed a leftover lock (${verdict.reason})`,
      pid: info?.process_id ?? null,
      hostname: info?.hostname ?? null,
      heartbeat_at: info?.heartbeat_at ?? null,
    },
  }
}

/** Whether the task was started to deliver its change (metadata's run record). */
function deliveryAsked(dir: string): boolean {
  try {
    const mode = readMetadata(dir).run?.deliver
    return mode === 'branch' || mode === 'pr'
  } catch {
    return false
  }
}
