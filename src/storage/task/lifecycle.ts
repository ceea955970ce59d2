import { chmodSync, existsSync, mkdirSync, readdirSync, renameSync, rmdirSync, rmSync, statSync } from 'node:fs'
import { activeEndpoint } from '../../config/endpoint.js'
import { CtxError, isErrno } from '../../errors.js'
import { taskDiskUse } from '../fs/disk.js'
import { DIR_MODE, makePrivateDir } from '../fs/files.js'
import { LOCATIONS } from '../fs/layout.js'
import type { TaskRef } from '../fs/layout.js'
import { hostname } from '../fs/process-info.js'
import { TaskLock } from '../lock/lock.js'
import type { LockLostError } from '../lock/lock.js'
import type { TaskEnv } from './env.js'
import { stalenessPolicy } from './env.js'
import { TaskHandle } from './handle.js'
import { readMetadata, writeMetadata } from './metadata.js'
import type { RunRecord, TaskKey, TaskMetadata } from './metadata.js'
import { indexTask } from './row.js'
import { countRecords } from './scan.js'
import { initialState, readState, resumableFromCompleted, updateState, writeState } from './state.js'
import type { TaskState } from './state.js'

// A task's life on disk: created in running/, resumed from paused/, and a completion
// that a dead owner left half-done finished by whoever finds it (docs/contract.md §3).

export interface NewTask {
  task_key: TaskKey
  user: string | null
  run?: RunRecord
  inherited_from?: string | null
}

/** Creates the base layout; refuses when a rename between locations would not be atomic. */
export function ensureLayout(env: TaskEnv): void {
  for (const location of LOCATIONS) makePrivateDir(env.layout.dir(location))
  const devices = new Set(LOCATIONS.map((l) => statSync(env.layout.dir(l)).dev))
  if (devices.size > 1) {
    throw new CtxError(`running/, paused/ and completed/ under ${env.layout.base} are on different filesystems`, {
      hint: 'tasks move between them by rename, which is only atomic on one filesystem; put them on one',
    })
  }
}

export interface CreateOptions {
  onLost?: (err: LockLostError) => void
  uuid?: string
}

/** Creates running/<uuid>: metadata.json, state.json (initializing), .lock, tasks.db row. */
export async function createTask(env: TaskEnv, task: NewTask, options: CreateOptions = {}): Promise<TaskHandle> {
  ensureLayout(env)
  const uuid = options.uuid ?? (await import('uuid')).v4()
  const dir = env.layout.taskDir('running', uuid)
  try {
    makePrivateDirExclusive(dir)
  } catch (err) {
    if (isErrno(err, 'EEXIST')) throw new CtxError(`task ${uuid} already exists`, { exitCode: 4 })
    throw err
  }
  // A uuid given (a fleet job's): the task may have left running/ already, made by another process for the same job.
  if (options.uuid !== undefined && (existsSync(env.layout.taskDir('paused', uuid)) || existsSync(env.layout.taskDir('completed', uuid)))) {
    rmdirSync(dir)
    throw new CtxError(`task ${uuid} already exists`, { exitCode: 4 })
  }
  try {
    const now = env.now()
    const llm = env.config.llm
    const endpoint = activeEndpoint(env.config)
    const key = task.task_key
    const metadata: TaskMetadata = {
      uuid,
      task_key: key,
      task_type: `${key.task_source}_${key.task_type}`,
      task_identifier: key.task_id,
      repository: key.owner && key.repo ? `${key.owner}/${key.repo}` : key.repo || key.owner || '',
      user: task.user,
      created_at: now.toISOString(),
      process_id: process.pid,
      hostname: hostname(),
      config: {
        llm_provider: llm.provider,
        model: endpoint.model,
        context_length: endpoint.context_length,
        compression_threshold: env.config.context.compression.threshold,
      },
      ...(task.run ? { run: task.run } : {}),
      ...(task.inherited_from ? { inherited_from: task.inherited_from } : {}),
    }
    writeMetadata(dir, metadata)
    await writeState(dir, initialState(now))
    const lock = await TaskLock.acquire(dir, { ...stalenessPolicy(env.config), now: env.now })
    const handle = await TaskHandle.open(env, uuid, dir, lock, options.onLost)
    indexTask(env, metadata, handle.state, 'running', { messages: 0, summaries: 0, tools: 0 })
    return handle
  } catch (err) {
    // Nothing of the task exists yet but what this process wrote (a full disk, a lock
    // refused): remove it, so that no half-created task is left for a reaper to guess at.
    rmSync(dir, { recursive: true, force: true })
    throw err
  }
}

/**
 * paused/<uuid> → running/<uuid>: the lock is taken first, then the directory moves.
 * A task still in running/ whose owner is provably dead (kill -9, a crashed host) is
 * taken over where it is: acquiring its stale lock is the proof.
 */
export async function resumeTask(env: TaskEnv, ref: TaskRef, options: CreateOptions & { continueTimeout?: boolean } = {}): Promise<TaskHandle> {
  // A task stopped by a budget (status timeout) continues with a raised budget, and one whose agent died as it was: it goes back from completed/.
  const continuing = ref.location === 'completed' && options.continueTimeout === true && resumableFromCompleted(safeState(ref.dir))
  if (ref.location === 'completed' && !continuing) {
    throw new CtxError(`task ${ref.uuid} is in completed/, not paused/`, {
      exitCode: 4,
      hint: 'only paused tasks, tasks stopped by a budget and tasks whose agent died can be resumed',
    })
  }
  if (continuing && readdirSync(ref.dir).some((name) => name.endsWith('.gz'))) {
    throw new CtxError(`task ${ref.uuid} was archived by cleanup (its files are gzipped)`, {
      exitCode: 4,
      hint: 'continue it as a new task: ctxagent run --task-file … with --task-id, or read it with ctxagent view',
    })
  }
  ensureLayout(env)
  // Resuming is an operator's request: on this host a dead owner's pid is proof enough.
  const lock = await TaskLock.acquire(ref.dir, { ...stalenessPolicy(env.config), deadPidIsProof: true, now: env.now })
  const target = env.layout.taskDir('running', ref.uuid)
  if (ref.location === 'paused' || continuing) {
    try {
      renameSync(ref.dir, target)
    } catch (err) {
      await lock.release()
      throw err
    }
    lock.movedTo(target)
  }
  let handle: TaskHandle
  try {
    handle = await TaskHandle.open(env, ref.uuid, target, lock, options.onLost)
  } catch (err) {
    // Its files cannot be opened (a link planted in it, an unreadable file): the task goes back as it was.
    if (ref.location === 'paused' || continuing) {
      renameSync(target, ref.dir)
      lock.movedTo(ref.dir)
    }
    await lock.release()
    throw err
  }
  await handle.update({ status: 'processing', last_activity: 'resumed', error: null, ...(continuing ? { completed_at: null } : {}) })
  return handle
}

/** mkdir without `recursive`: EEXIST means the uuid is taken. */
function makePrivateDirExclusive(dir: string): void {
  mkdirSync(dir, { mode: DIR_MODE })
  chmodSync(dir, DIR_MODE)
}

/**
 * A completed/ task still saying `completing` (its owner died after the move) is
 * completed. Returns its new state, or null when it was not completing.
 */
export async function finishCompleting(env: TaskEnv, ref: TaskRef): Promise<TaskState | null> {
  if (safeState(ref.dir)?.status !== 'completing') return null
  const next = await updateState(
    ref.dir,
    (s) => (s.status === 'completing' ? { status: 'completed', completed_at: s.completed_at ?? env.now().toISOString() } : {}),
    env.now(),
  )
  await refreshIndex(env, ref, next)
  return next
}

/** A task's state, or null when it cannot be read (a reaper decides on what it can read). */
export function safeState(dir: string): TaskState | null {
  try {
    return readState(dir)
  } catch (err) {
    if (err instanceof CtxError) return null
    throw err
  }
}

/** Rewrites a task's row in the index from its directory (a no-op without an index). */
export async function refreshIndex(env: TaskEnv, ref: TaskRef, state: TaskState): Promise<void> {
  if (env.index === null) return
  try {
    const disk = ref.location === 'completed' ? taskDiskUse(ref.dir) : null
    indexTask(env, readMetadata(ref.dir), state, ref.location, await countRecords(ref.dir, state), disk)
  } catch (err) {
    env.warn(`tasks.db not updated for ${ref.uuid}: ${(err as Error).message}`)
  }
}
