import { availableParallelism } from 'node:os'
import type { Pool } from 'pg'
import { dirname, join } from 'node:path'
import { existsSync, lstatSync, readdirSync, renameSync, rmdirSync, rmSync, statSync } from 'node:fs'
import { CtxError, isErrno } from '../errors.js'
import { explainSystemError, isTreeWide } from '../system-errors.js'
import { archivableFiles, eachLimit, gzipInPlace, removeStaleTemps } from '../storage/format/archive.js'
import { taskDiskUse } from '../storage/fs/disk.js'
import { assertRegularFiles, deadTemps, makePrivateDir, removeDeadTemps } from '../storage/fs/files.js'
import { BLOB_DIR } from '../storage/fs/layout.js'
import { TASK_DATA_FILES } from '../storage/fs/layout.js'
import type { TaskRef } from '../storage/fs/layout.js'
import { judgeLock } from '../storage/lock/staleness.js'
import { readLock } from '../storage/lock/record.js'
import type { StalenessPolicy } from '../storage/lock/staleness.js'
import { pidStatus } from '../storage/fs/process-info.js'
import { finishCompleting } from '../storage/task/lifecycle.js'
import { readState } from '../storage/task/state.js'
import type { TaskEnv } from '../storage/task/env.js'
import { listTasks } from '../storage/task/scan.js'

export interface PlannedTask {
  uuid: string
  completed_at: string | null
  age_days: number
  bytes: number
  /** Files to gzip (compress only). */
  files?: string[]
}

export interface CleanupPlan {
  compress: PlannedTask[]
  delete: PlannedTask[]
  skipped: { uuid: string; reason: string }[]
  /** Tasks without a usable completed_at, aged by their files' times (`dated_by`). */
  undated: { uuid: string; reason: string; dated_by: string }[]
  /** Tasks that could not be read (permissions, a damaged file system): left alone, reported. */
  unreadable: { uuid: string; error: string }[]
  /** Temp files that dead processes left in task directories of paused/ and completed/. */
  litter: string[]
}

export interface RetentionPolicy {
  compressAfterMs: number
  deleteAfterMs: number
  lockPolicy: StalenessPolicy
}

const DAY = 86_400_000

/**
 * What cleanup would do in completed/: delete tasks older than deleteAfter, gzip
 * the plain files of tasks older than compressAfter. Ages count from state.json's
 * completed_at. A task without a usable one (state.json missing, empty, not JSON, or
 * without a valid completed_at) is reported in `undated` and aged by its own files'
 * times instead, so it still expires. A task holding a live lock (someone is working
 * on it) is left alone.
 */
export function planCleanup(env: TaskEnv, policy: RetentionPolicy): CleanupPlan {
  const plan: CleanupPlan = { compress: [], delete: [], skipped: [], undated: [], unreadable: [], litter: [] }
  for (const ref of listTasks(env.layout, ['paused'])) plan.litter.push(...deadTemps(ref.dir), ...deadTemps(join(ref.dir, BLOB_DIR)))
  for (const ref of listTasks(env.layout, ['completed'])) {
    try {
      planTask(env, policy, ref, plan)
    } catch (err) {
      // One task that cannot be read (another user's, a damaged disk) does not stop the others.
      if (isTreeWide(err, env.layout.base)) throw err
      plan.unreadable.push({ uuid: ref.uuid, error: (explainSystemError(err, env.layout.base) ?? (err as Error)).message })
    }
  }
  return plan
}

function planTask(env: TaskEnv, policy: RetentionPolicy, ref: TaskRef, plan: CleanupPlan): void {
  const dated = completionTime(ref.dir)
  if (dated === null) return // gone meanwhile
  plan.litter.push(...deadTemps(ref.dir), ...deadTemps(join(ref.dir, BLOB_DIR)))
  if (dated.undated) plan.undated.push({ uuid: ref.uuid, reason: dated.undated, dated_by: new Date(dated.since).toISOString() })
  const age = env.now().getTime() - dated.since
  if (age <= policy.compressAfterMs && age <= policy.deleteAfterMs) return
  const lock = readLock(ref.dir)
  if (lock !== null && !judgeLock(lock, env.now(), policy.lockPolicy).stale) {
    plan.skipped.push({ uuid: ref.uuid, reason: 'held by a live process' })
    return
  }
  const item: PlannedTask = { uuid: ref.uuid, completed_at: dated.completedAt, age_days: Math.floor(age / DAY), bytes: taskDiskUse(ref.dir).bytes }
  if (age > policy.deleteAfterMs) {
    plan.delete.push(item)
    return
  }
  // Half a task gzipped around a link or a FIFO is worse than none: such a task is reported, not compressed.
  assertRegularFiles(ref.dir, TASK_DATA_FILES)
  const files = archivableFiles(ref.dir)
  if (files.length > 0) plan.compress.push({ ...item, files })
}

interface Dated {
  since: number
  completedAt: string | null
  /** Why completed_at could not be used; null when it was. */
  undated: string | null
}

/** When a finished task finished: completed_at, or else the newest of its files' times. Null when the task is gone. */
function completionTime(dir: string): Dated | null {
  let why: string
  try {
    const state = readState(dir)
    const completedAt = state?.completed_at ?? null
    const since = completedAt === null ? Number.NaN : Date.parse(completedAt)
    if (!Number.isNaN(since)) return { since, completedAt, undated: null }
    why =
      state === null
        ? 'no state.json'
        : completedAt === null
          ? 'state.json has no completed_at'
          : `state.json's completed_at ${JSON.stringify(completedAt).slice(0, 40)} is not a date`
  } catch (err) {
    if (!(err instanceof CtxError)) throw err
    why = err.message.replace(`${dir}/`, '')
  }
  const since = newestFileTime(dir)
  return since === null ? null : { since, completedAt: null, undated: why }
}

/**
 * The newest modification time of a task's files (gzip keeps them, so archiving does
 * not make a task young again), or the directory's own when it has none.
 */
function newestFileTime(dir: string): number | null {
  let names: string[]
  try {
    names = readdirSync(dir)
  } catch (err) {
    if (isErrno(err, 'ENOENT')) return null
    throw err
  }
  let newest = 0
  for (const name of names) {
    if (name.startsWith('.')) continue // .lock and temp files say nothing about when the task ran
    try {
      const st = lstatSync(join(dir, name))
      if (st.isFile()) newest = Math.max(newest, st.mtimeMs)
    } catch (err) {
      if (!isErrno(err, 'ENOENT')) throw err
    }
  }
  if (newest > 0) return newest
  try {
    return statSync(dir).mtimeMs
  } catch (err) {
    if (isErrno(err, 'ENOENT')) return null
    throw err
  }
}

export interface CleanupDone {
  compressed: (PlannedTask & { bytes_after: number })[]
  deleted: PlannedTask[]
  /** Tasks whose gzip or deletion failed (left as they were, or with some files gzipped). */
  failed: { uuid: string; error: string }[]
  /** Dead processes' temp files removed from task directories. */
  litter_removed: number
}

/**
 * Carries out a plan: gzips files several at a time (one per core), deletes
 * expired tasks by first renaming them out of completed/ (so no reader ever sees a
 * half-deleted task), and keeps tasks.db in step.
 */
export async function executeCleanup(env: TaskEnv, plan: CleanupPlan, onFile: () => void = () => undefined): Promise<CleanupDone> {
  const done: CleanupDone = { compressed: [], deleted: [], failed: [], litter_removed: 0 }
  const failed = new Map<string, string>()
  // A task that fails does not stop the others; a full or read-only disk stops them all.
  const fail = (uuid: string, err: unknown): void => {
    if (isTreeWide(err, env.layout.base)) throw err
    if (!failed.has(uuid)) failed.set(uuid, (explainSystemError(err, env.layout.base) ?? (err as Error)).message)
  }
  for (const dir of new Set(plan.litter.map((path) => dirname(path)))) done.litter_removed += removeDeadTemps(dir)
  const jobs: { task: PlannedTask; file: string }[] = []
  for (const task of plan.compress) {
    const ref: TaskRef = { uuid: task.uuid, location: 'completed', dir: env.layout.taskDir('completed', task.uuid) }
    try {
      await finishCompleting(env, ref)
      removeStaleTemps(ref.dir)
      for (const file of task.files ?? []) jobs.push({ task, file: join(ref.dir, file) })
    } catch (err) {
      fail(task.uuid, err)
    }
  }
  await eachLimit(jobs, availableParallelism() + 1, async ({ task, file }) => {
    try {
      await gzipInPlace(file)
    } catch (err) {
      if (!isErrno(err, 'ENOENT')) fail(task.uuid, err) // ENOENT: already archived by a concurrent cleanup
    }
    onFile()
  })
  const measured = plan.compress
    .filter((task) => !failed.has(task.uuid))
    .map((task) => ({ task, disk: taskDiskUse(env.layout.taskDir('completed', task.uuid)) }))
  env.index?.setDiskUse(measured.map(({ task, disk }) => ({ uuid: task.uuid, disk })))
  for (const { task, disk } of measured) done.compressed.push({ ...task, bytes_after: disk.bytes })
  removeDeadTemps(env.layout.dir('completed'))
  const trash = join(env.layout.base, '.trash')
  if (plan.delete.length > 0) makePrivateDir(trash)
  for (const task of plan.delete) {
    const source = env.layout.taskDir('completed', task.uuid)
    const target = join(trash, `${task.uuid}.${process.pid}`)
    try {
      try {
        renameSync(source, target)
      } catch (err) {
        if (!isErrno(err, 'ENOENT')) throw err
        if (!existsSync(source)) continue // deleted meanwhile
        // A concurrent cleanup removed the emptied .trash/ just now: make it again.
        makePrivateDir(trash)
        renameSync(source, target)
      }
      env.index?.remove(task.uuid)
      rmSync(target, { recursive: true, force: true })
      done.deleted.push(task)
    } catch (err) {
      fail(task.uuid, err)
    }
    onFile()
  }
  removeDeadTrash(trash)
  done.failed = [...failed].map(([uuid, error]) => ({ uuid, error }))
  return done
}

/**
 * Empties .trash/ of what this cleanup and cleanups that died while deleting left
 * there (`<uuid>.<pid>`), never what a concurrent live cleanup is deleting right now;
 * removes .trash/ itself once it is empty.
 */
function removeDeadTrash(trash: string): void {
  let names: string[]
  try {
    names = readdirSync(trash)
  } catch (err) {
    if (isErrno(err, 'ENOENT')) return
    throw err
  }
  for (const name of names) {
    const pid = Number(/\.(\d+)$/.exec(name)?.[1])
    if (pid === process.pid || (Number.isInteger(pid) && pidStatus(pid) === 'gone')) rmSync(join(trash, name), { recursive: true, force: true })
  }
  try {
    rmdirSync(trash)
  } catch (err) {
    // Not empty (a live cleanup is deleting there) or already gone: both fine.
    if (!isErrno(err, 'ENOTEMPTY') && !isErrno(err, 'EEXIST') && !isErrno(err, 'ENOENT')) throw err
  }
}

/**
 * Retention (docs/contract.md §14.4): deletes finished job rows finished more than `days` ago, and the
 * rows of workers stopped, or silent for `liveSeconds`, that long ago. Open jobs are never
 * touched. With `dryRun`, only counts.
 */
export async function expireRows(pool: Pool, days: number, liveSeconds: number, dryRun: boolean): Promise<{ jobs: number; workers: number }> {
  const jobsWhere = `state IN ('done', 'failed', 'cancelled') AND finished_at < now() - make_interval(secs => $1)`
  const workersWhere = `COALESCE(stopped_at, heartbeat_at + make_interval(secs => $2)) < now() - make_interval(secs => $1)
                        AND NOT EXISTS (SELECT 1 FROM fleet_jobs j WHERE j.claimed_by = fleet_workers.id AND j.state = 'running')`
  const secs = days * 86_400
  if (dryRun) {
    const jobs = await pool.query<{ n: string }>(`SELECT count(*) AS n FROM fleet_jobs WHERE ${jobsWhere}`, [secs])
    const workers = await pool.query<{ n: string }>(`SELECT count(*) AS n FROM fleet_workers WHERE ${workersWhere}`, [secs, liveSeconds])
    return { jobs: Number(jobs.rows[0]?.n ?? 0), workers: Number(workers.rows[0]?.n ?? 0) }
  }
  // A job's history goes with it (fleet_job_attempts has no foreign key: see pg-schema.ts).
  const jobs = await pool.query<{ n: string }>(
    `WITH gone AS (DELETE FROM fleet_jobs WHERE ${jobsWhere} RETURNING id),
                                 history AS (DELETE FROM fleet_job_attempts a USING gone WHERE a.job_id = gone.id)
                                 SELECT count(*) AS n FROM gone`,
    [secs],
  )
  const workers = await pool.query(`DELETE FROM fleet_workers WHERE ${workersWhere}`, [secs, liveSeconds])
  return { jobs: Number(jobs.rows[0]?.n ?? 0), workers: workers.rowCount ?? 0 }
}
