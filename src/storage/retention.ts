import { availableParallelism } from 'node:os'
import { join } from 'node:path'
import { renameSync, rmSync, statSync } from 'node:fs'
import { CtxError, isErrno } from '../errors.js'
import { archivableFiles, eachLimit, gzipInPlace, removeStaleTemps } from './archive.js'
import { taskDiskUse } from './disk.js'
import { makePrivateDir } from './files.js'
import type { TaskRef } from './layout.js'
import { judgeLock, readLock } from './lock.js'
import type { StalenessPolicy } from './lock.js'
import { finishCompleting } from './reaper.js'
import { readState } from './state.js'
import type { TaskEnv } from './task-env.js'
import { listTasks } from './task-scan.js'

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
 * completed_at (the directory's mtime when it has none). A task holding a live lock
 * (someone is working on it) is left alone.
 */
export function planCleanup(env: TaskEnv, policy: RetentionPolicy): CleanupPlan {
  const plan: CleanupPlan = { compress: [], delete: [], skipped: [] }
  const now = env.now().getTime()
  for (const ref of listTasks(env.layout, ['completed'])) {
    let completedAt: string | null
    try {
      completedAt = readState(ref.dir)?.completed_at ?? null
    } catch (err) {
      if (!(err instanceof CtxError)) throw err
      completedAt = null
    }
    const since = Date.parse(completedAt ?? '') || mtimeOf(ref.dir)
    if (since === null) continue
    const age = now - since
    if (age <= policy.compressAfterMs && age <= policy.deleteAfterMs) continue
    const lock = readLock(ref.dir)
    if (lock !== null && !judgeLock(lock, env.now(), policy.lockPolicy).stale) {
      plan.skipped.push({ uuid: ref.uuid, reason: 'held by a live process' })
      continue
    }
    const item: PlannedTask = { uuid: ref.uuid, completed_at: completedAt, age_days: Math.floor(age / DAY), bytes: taskDiskUse(ref.dir).bytes }
    if (age > policy.deleteAfterMs) {
      plan.delete.push(item)
      continue
    }
    const files = archivableFiles(ref.dir)
    if (files.length > 0) plan.compress.push({ ...item, files })
  }
  return plan
}

function mtimeOf(dir: string): number | null {
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
}

/**
 * Carries out a plan: gzips files several at a time (one per core), deletes
 * expired tasks by first renaming them out of completed/ (so no reader ever sees a
 * half-deleted task), and keeps tasks.db in step.
 */
export async function executeCleanup(env: TaskEnv, plan: CleanupPlan, onFile: () => void = () => undefined): Promise<CleanupDone> {
  const done: CleanupDone = { compressed: [], deleted: [] }
  const jobs: { task: PlannedTask; file: string }[] = []
  for (const task of plan.compress) {
    const ref: TaskRef = { uuid: task.uuid, location: 'completed', dir: env.layout.taskDir('completed', task.uuid) }
    await finishCompleting(env, ref)
    removeStaleTemps(ref.dir)
    for (const file of task.files ?? []) jobs.push({ task, file: join(ref.dir, file) })
  }
  await eachLimit(jobs, availableParallelism() + 1, async ({ file }) => {
    try {
      await gzipInPlace(file)
    } catch (err) {
      if (!isErrno(err, 'ENOENT')) throw err // already archived by a concurrent cleanup
    }
    onFile()
  })
  const measured = plan.compress.map((task) => ({ task, disk: taskDiskUse(env.layout.taskDir('completed', task.uuid)) }))
  env.index?.setDiskUse(measured.map(({ task, disk }) => ({ uuid: task.uuid, disk })))
  for (const { task, disk } of measured) done.compressed.push({ ...task, bytes_after: disk.bytes })
  const trash = join(env.layout.base, '.trash')
  if (plan.delete.length > 0) makePrivateDir(trash)
  for (const task of plan.delete) {
    const target = join(trash, `${task.uuid}.${process.pid}`)
    try {
      renameSync(env.layout.taskDir('completed', task.uuid), target)
    } catch (err) {
      if (isErrno(err, 'ENOENT')) continue // deleted meanwhile
      throw err
    }
    env.index?.remove(task.uuid)
    rmSync(target, { recursive: true, force: true })
    done.deleted.push(task)
    onFile()
  }
  // Leftovers of a cleanup that crashed while deleting.
  rmSync(trash, { recursive: true, force: true })
  return done
}
