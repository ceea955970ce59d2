import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import type { CommandEnv } from '../command-env.js'
import { fleetDatabaseUrl } from '../command-env.js'
import { CtxError } from '../errors.js'
import { jobProblem } from '../fleet/queue/job-spec.js'
import type { JobSpec } from '../fleet/queue/job-spec.js'
import { JobQueue } from '../fleet/queue/job-queue.js'
import type { JobKind, JobState } from '../fleet/queue/job.js'
import type { TaskRef } from '../storage/fs/layout.js'
import type { Actor } from './actor.js'
import { auditAction } from './actor.js'
import { fleetPool } from './fleet-db.js'

/** A job to queue: its task, what it runs, and whose it is (fleet.limits.per_user counts by `user`). */
export interface JobRequest {
  uuid: string
  kind: JobKind
  spec: JobSpec
  priority: number
  user: string | null
  /** An idempotency key: while a job holding it is open, nothing more is queued. */
  key: string | null
}

/** Queued as job `job`; or `held`: the job holding the same key is open, or ended done within fleet.key_retention_hours, and nothing was queued. */
export type EnqueueOutcome =
  | { kind: 'queued'; uuid: string; job: number }
  | { kind: 'held'; uuid: string; job: number; state: JobState; key: string; finished_at: string | null }

/**
 * Queues a job in the fleet's database (checked as a worker checks it: nothing it would
 * refuse is written). A task that already has an open job is a conflict (exit 4); the
 * same key again is the job already queued.
 */
export async function enqueueJob(ctx: CommandEnv, request: JobRequest, actor: Actor): Promise<EnqueueOutcome> {
  const problem = jobProblem({ task_uuid: request.uuid, kind: request.kind, priority: request.priority, attempts: 0, spec: request.spec })
  if (problem !== null) throw new CtxError(`the job is not valid: ${problem}`, { exitCode: 2, hint: 'check the flags' })
  const { pool } = await fleetPool(ctx, actor.via === 'serve' ? 'serve' : 'enqueue')
  try {
    const queue = new JobQueue(pool)
    const failed = (err: unknown): never => {
      throw new CtxError(`the job was not queued (${(err as Error).message})`, { exitCode: 1, hint: 'check that the database is up, then try again' })
    }
    const job = { task_uuid: request.uuid, kind: request.kind, spec: request.spec, priority: request.priority, user: request.user }
    const conflict = () =>
      new CtxError(`task ${request.uuid} already has a job waiting, running or retrying`, {
        exitCode: 4,
        hint: `see ctxagent jobs --task ${request.uuid.slice(0, 8)}`,
      })
    const queued = (id: number): EnqueueOutcome => {
      auditAction(ctx, actor, 'enqueue', request.uuid)
      return { kind: 'queued', uuid: request.uuid, job: id }
    }
    if (request.key === null) {
      const id = await queue.enqueue(job).catch(failed)
      if (id === null) throw conflict()
      return queued(id)
    }
    // The key is held by an open job, or by one that ended done within fleet.key_retention_hours (docs/fleet.md#idempotency-keys).
    const keepSeconds = ctx.config.fleet.key_retention_hours * 3600
    for (let tries = 0; ; tries++) {
      const got = await queue.enqueueKeyed({ ...job, key: request.key }, keepSeconds).catch(failed)
      if (got !== null && 'id' in got) return queued(got.id)
      if (got !== null)
        return { kind: 'held', uuid: got.holder.task_uuid, job: got.holder.id, state: got.holder.state, key: request.key, finished_at: got.holder.finished_at }
      // Another enqueue of the key, or of the task, won the insert: ask again (its job is then the holder).
      if (tries >= 3) throw conflict()
    }
  } finally {
    await pool.end().catch(() => undefined)
  }
}

/** The resume job of a paused task: any host's worker continues it, counted for the user it was run for. */
export function resumeRequest(ref: TaskRef, options: { priority?: number; key?: string | null; maxCostUsd?: number } = {}): JobRequest {
  if (ref.location !== 'paused') {
    throw new CtxError(`task ${ref.uuid} is ${ref.location === 'running' ? 'running' : 'finished'} (in ${ref.location}/), not paused`, {
      exitCode: 4,
      hint: ref.location === 'running' ? 'pause it first with ctxagent pause' : 'enqueue a new task with the same --task-id to continue from its summary',
    })
  }
  const spec = options.maxCostUsd === undefined ? {} : { max_cost_usd: options.maxCostUsd }
  return { uuid: ref.uuid, kind: 'resume', spec, priority: options.priority ?? 0, user: metadataUser(ref.dir), key: options.key ?? null }
}

/**
 * Resumes a paused task where no agent can be started here (the page): its resume job
 * queued in the fleet, as `enqueue --resume` queues it; without a fleet, refused with
 * the command to run on a host.
 */
export async function queueResume(ctx: CommandEnv, ref: TaskRef, actor: Actor): Promise<EnqueueOutcome> {
  const request = resumeRequest(ref)
  if (fleetDatabaseUrl(ctx) === null) {
    throw new CtxError(`task ${ref.uuid} is paused, and there is no fleet to queue its resume in`, {
      exitCode: 4,
      hint: `run ctxagent run --resume ${ref.uuid} on a host, or set fleet.database_url`,
    })
  }
  return enqueueJob(ctx, request, actor)
}

/** The user a paused task was run for (its metadata), for fleet.limits.per_user; null when its metadata does not say. */
function metadataUser(dir: string): string | null {
  try {
    const meta = JSON.parse(readFileSync(join(dir, 'metadata.json'), 'utf8')) as { user?: unknown }
    return typeof meta.user === 'string' ? meta.user : null
  } catch {
    return null
  }
}
