import type { Pool, PoolClient } from 'pg'
import { inTransaction } from '../storage/index/pg-pool.js'

/** What a job asks a worker to run: the flags of `run`, checked by enqueue. */
export interface JobSpec {
  task?: string
  github?: string
  gitlab?: string
  user?: string
  workspace?: string
  /** A repository to clone for the task (into fleet.workspaces_dir/<uuid>), and the branch, tag or commit to check out. */
  repo?: string
  ref?: string
  task_id?: string
  max_turns?: number
  max_tokens?: number
  timeout?: string
}

export type JobKind = 'new' | 'resume'
export type JobState = 'waiting' | 'running' | 'done'

export interface Job {
  id: number
  task_uuid: string
  kind: JobKind
  spec: JobSpec
  state: JobState
  priority: number
  attempts: number
  claimed_by: string | null
}

/** A job's end: what its task became, and whether its resume is queued in the same transaction. */
export interface JobEnd {
  outcome: string
  error?: string | null
  resume?: boolean
}

/**
 * The fleet's queue in PostgreSQL (SPEC §14.3): a job is claimed by one worker in one
 * statement (`FOR UPDATE SKIP LOCKED`: claimers never wait on each other), and a
 * trigger NOTIFYs `ctxagent_jobs` whenever a job starts waiting.
 */
export class JobQueue {
  constructor(readonly pool: Pool) {}

  /** Queues a job; false when its task already has an open one (a unique index says so, in the same statement). */
  async enqueue(job: { task_uuid: string; kind: JobKind; spec: JobSpec; priority?: number; dedupe_key?: string | null }, client: Pool | PoolClient = this.pool): Promise<number | null> {
    const result = await client.query<{ id: string }>(
      `INSERT INTO fleet_jobs (task_uuid, kind, spec, priority, dedupe_key) VALUES ($1, $2, $3, $4, $5)
       ON CONFLICT DO NOTHING RETURNING id`,
      [job.task_uuid, job.kind, JSON.stringify(job.spec), job.priority ?? 0, job.dedupe_key ?? null],
    )
    const row = result.rows[0]
    return row === undefined ? null : Number(row.id)
  }

  /** The next waiting job, now this worker's; null when none waits. */
  async claim(workerId: string): Promise<Job | null> {
    const result = await this.pool.query<Record<string, unknown>>(
      `UPDATE fleet_jobs j SET state = 'running', claimed_by = $1, claimed_at = now(), attempts = j.attempts + 1
       WHERE j.id = (SELECT id FROM fleet_jobs WHERE state = 'waiting' ORDER BY priority DESC, id FOR UPDATE SKIP LOCKED LIMIT 1)
       RETURNING j.id, j.task_uuid, j.kind, j.spec, j.state, j.priority, j.attempts, j.claimed_by`,
      [workerId],
    )
    const row = result.rows[0]
    return row === undefined ? null : decodeJob(row)
  }

  /** Hands a claimed job back untouched (claimed as its worker was stopping). */
  async release(job: Job, workerId: string): Promise<void> {
    await this.pool.query(
      `UPDATE fleet_jobs SET state = 'waiting', claimed_by = NULL, claimed_at = NULL, attempts = attempts - 1 WHERE id = $1 AND claimed_by = $2 AND state = 'running'`,
      [job.id, workerId],
    )
  }

  /**
   * Hands a claimed job back to wait again with its attempt counted (its agent was
   * killed before its task began: nothing ran); one that has had `maxAttempts` ends
   * with `last` instead. True when it waits again.
   */
  retry(job: Job, workerId: string, maxAttempts: number, last: { outcome: string; error: string }): Promise<boolean> {
    return inTransaction(this.pool, async (client) => {
      const again = await client.query(
        `UPDATE fleet_jobs SET state = 'waiting', claimed_by = NULL, claimed_at = NULL WHERE id = $1 AND claimed_by = $2 AND state = 'running' AND attempts < $3`,
        [job.id, workerId, maxAttempts],
      )
      if (again.rowCount === 1) return true
      await client.query(`UPDATE fleet_jobs SET state = 'done', finished_at = now(), outcome = $3, error = $4 WHERE id = $1 AND claimed_by = $2 AND state = 'running'`, [job.id, workerId, last.outcome, last.error])
      return false
    })
  }

  /**
   * Ends a job this worker holds; with `resume`, queues the task's resume in the same
   * transaction, so that a stop between the two can neither lose it nor queue it twice.
   * False when the job was no longer this worker's (a reaper settled it).
   */
  finish(job: Job, workerId: string, end: JobEnd): Promise<boolean> {
    return inTransaction(this.pool, async (client) => {
      const done = await client.query(
        `UPDATE fleet_jobs SET state = 'done', finished_at = now(), outcome = $3, error = $4
         WHERE id = $1 AND claimed_by = $2 AND state = 'running'`,
        [job.id, workerId, end.outcome, end.error ?? null],
      )
      if (done.rowCount === 1 && end.resume === true) await this.enqueue({ task_uuid: job.task_uuid, kind: 'resume', spec: job.spec, priority: job.priority }, client)
      return done.rowCount === 1
    })
  }
}

/** A row as it is: whether it can be run is the worker's to check (jobProblem), not taken for granted here. */
function decodeJob(row: Record<string, unknown>): Job {
  return {
    id: Number(row.id),
    task_uuid: String(row.task_uuid),
    kind: String(row.kind) as JobKind,
    spec: (row.spec ?? {}) as JobSpec,
    state: row.state as JobState,
    priority: Number(row.priority),
    attempts: Number(row.attempts),
    claimed_by: (row.claimed_by as string | null) ?? null,
  }
}
