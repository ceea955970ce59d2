import type { Pool } from 'pg'
import { CtxError, LockedError, NotFoundError, UsageError } from '../../errors.js'
import { inTransaction } from '../../storage/index/pg-pool.js'
import type { JobKind, JobState } from './job.js'
import type { JobSpec } from './job-spec.js'
import { JOB_STATES } from './job.js'
import { ALL_WORKERS_CHANNEL, CANCEL_PAYLOAD } from './listener.js'
import { jobAttempts } from './job-history.js'
import type { Attempt } from './job-history.js'

/** A job as `ctxagent jobs` shows it (docs/contract.md §14.4). */
export interface JobRow {
  id: number
  state: JobState
  kind: JobKind
  task_uuid: string
  user: string | null
  /** The host of the worker that claimed it last (null: never claimed). */
  host: string | null
  attempts: number
  priority: number
  created_at: string
  claimed_at: string | null
  finished_at: string | null
  /** When a retrying job is due. */
  next_run_at: string | null
  /** What its task became (completed, failed, paused, died, cancelled, …). */
  outcome: string | null
  /** The last error: why it failed, or why its last run did not finish. */
  error: string | null
  key: string | null
  cancel_requested: boolean
  /** What the job does, in a line: its task's first line, the issue it works on, or the task it resumes. */
  what: string
  /** A retrying job waiting out a usage limit (rate-limit) or a spent budget (budget), until next_run_at; null for a retry after a failure. */
  waiting_for: 'rate-limit' | 'budget' | null
  /** With waiting_for budget: the cap. */
  wait_cap: string | null
  /** Claims that ended in such a wait: they spend no fleet.retry attempt (those counted are attempts − waits). */
  waits: number
}

export interface JobFilter {
  state?: JobState
  user?: string
  task?: string
  limit: number
}

const SELECT = `SELECT j.id, j.state, j.kind, j.task_uuid, j."user", j.claimed_by, w.hostname, j.attempts, j.priority, j.created_at, j.claimed_at,
                       j.finished_at, j.next_run_at, j.outcome, j.error, j.idempotency_key, j.cancel_requested_at, j.spec,
                       j.wait_reason, j.wait_cap, j.limit_waits
                FROM fleet_jobs j LEFT JOIN fleet_workers w ON w.id = j.claimed_by`

/** A job id as typed by an operator: a positive whole number. */
export function parseJobId(value: string): number {
  const n = Number(value)
  if (!/^\d{1,15}$/.test(value.trim()) || !Number.isSafeInteger(n) || n < 1)
    throw new UsageError(`'${value.slice(0, 40)}' is not a job id`, 'job ids are positive whole numbers; see ctxagent jobs')
  return n
}

export function parseJobState(value: string): JobState {
  if (!(JOB_STATES as readonly string[]).includes(value))
    throw new UsageError(`--state '${value.slice(0, 20)}' is not a job state`, `give one of ${JOB_STATES.join(', ')}`)
  return value as JobState
}

/** Jobs, newest first, with the filters given. `task` matches a uuid or its prefix. */
export async function listJobs(pool: Pool, filter: JobFilter): Promise<JobRow[]> {
  const result = await pool.query<Record<string, unknown>>(
    `${SELECT} WHERE ($1::text IS NULL OR j.state = $1) AND ($2::text IS NULL OR j."user" = $2) AND ($3::text IS NULL OR j.task_uuid LIKE $3 || '%')
     ORDER BY j.id DESC LIMIT $4`,
    [filter.state ?? null, filter.user ?? null, filter.task?.toLowerCase() ?? null, filter.limit],
  )
  return result.rows.map(toRow)
}

/** One job with its spec (what it runs) and its history (every attempt, oldest first); NotFoundError when there is none. */
export async function showJob(pool: Pool, id: number): Promise<JobRow & { spec: JobSpec; history: Attempt[] }> {
  const row = (await pool.query<Record<string, unknown>>(`${SELECT} WHERE j.id = $1`, [id])).rows[0]
  if (row === undefined) throw notFound(id)
  return { ...toRow(row), spec: (row.spec ?? {}) as JobSpec, history: await jobAttempts(pool, id) }
}

/**
 * Cancels a job: a waiting or retrying one never runs; a running one is marked, and ends
 * `cancelled` (not retried, its resume not queued) once its task stops — the caller asks
 * the task's agent to pause when it runs, and its worker, woken, does not start an agent
 * it has not started yet, and pauses one that is starting (docs/fleet.md#cancelling-a-job).
 * A finished job is a conflict.
 */
export async function cancelJob(pool: Pool, id: number): Promise<{ task_uuid: string; was: JobState }> {
  return inTransaction(pool, async (client) => {
    const row = (await client.query<{ state: JobState; task_uuid: string }>('SELECT state, task_uuid FROM fleet_jobs WHERE id = $1 FOR UPDATE', [id])).rows[0]
    if (row === undefined) throw notFound(id)
    if (row.state === 'running') {
      await client.query('UPDATE fleet_jobs SET cancel_requested_at = COALESCE(cancel_requested_at, now()) WHERE id = $1', [id])
      // Every worker looks at its claims when this commits: the one holding it does not start its agent, or pauses it as it starts.
      await client.query('SELECT pg_notify($1, $2)', [ALL_WORKERS_CHANNEL, CANCEL_PAYLOAD])
    } else if (row.state === 'waiting' || row.state === 'retrying') {
      await client.query(`UPDATE fleet_jobs SET state = 'cancelled', finished_at = now(), outcome = 'cancelled', next_run_at = NULL WHERE id = $1`, [id])
    } else {
      throw new LockedError(`job ${id} is ${row.state} already; there is nothing to cancel`, 'see ctxagent jobs show ' + id)
    }
    return { task_uuid: row.task_uuid, was: row.state }
  })
}

/** What retryJob asks of the tree. */
export interface RetryLookups {
  /** Where the job's task is. */
  location: (uuid: string) => 'running' | 'paused' | 'completed' | null
  /** Whether an eval's trial has its verdict recorded (evals/<id>/trials.jsonl). */
  judged: (trial: NonNullable<JobSpec['eval']>) => Promise<boolean>
}

/**
 * Runs a failed or cancelled job again: it waits, its attempts counted afresh, as a resume
 * when its task exists. A retrying job (after a failure, or waiting out a usage limit or a
 * budget) is run now: it waits at once, its attempts as they were. An eval trial's job that
 * ended done without a verdict (`no_verdict`: its task paused for good, or its check unable
 * to run) runs again too, its task in completed/ included: `eval trial` resumes a paused
 * task and judges an ended one without running its agent (docs/eval.md#in-the-fleet). Any
 * other done, waiting or running job is a conflict, and so is a task that finished or has
 * another open job.
 */
export async function retryJob(pool: Pool, id: number, tree: RetryLookups): Promise<{ task_uuid: string; kind: JobKind; was: JobState }> {
  return inTransaction(pool, async (client) => {
    const row = (
      await client.query<{ state: JobState; task_uuid: string; kind: JobKind; spec: JobSpec }>(
        'SELECT state, task_uuid, kind, spec FROM fleet_jobs WHERE id = $1 FOR UPDATE',
        [id],
      )
    ).rows[0]
    if (row === undefined) throw notFound(id)
    const trial = row.spec?.eval
    const unjudged = row.state === 'done' && trial !== undefined && !(await tree.judged(trial))
    if (row.state === 'retrying') {
      // Hurried: claimable now, by the next free worker (the trigger wakes one).
      await client.query(`UPDATE fleet_jobs SET state = 'waiting', next_run_at = NULL, wait_reason = NULL, wait_cap = NULL WHERE id = $1`, [id])
      return { task_uuid: row.task_uuid, kind: row.kind, was: row.state }
    }
    if (row.state !== 'failed' && row.state !== 'cancelled' && !unjudged) {
      throw new LockedError(
        trial !== undefined && row.state === 'done'
          ? `job ${id} is done and its eval trial has its verdict; only a trial without one is run again`
          : `job ${id} is ${row.state}; only a failed, cancelled or retrying job is run again`,
        row.state === 'done'
          ? 'a done job ran to its end: enqueue a new task (with the same --task-id to inherit its summary)'
          : row.state === 'waiting'
            ? 'it runs as soon as a worker is free'
            : 'wait for it to finish, or cancel it first',
      )
    }
    const location = tree.location(row.task_uuid)
    if (location === 'completed' && trial === undefined)
      throw new LockedError(
        `task ${row.task_uuid} of job ${id} is finished (in completed/)`,
        'enqueue a new task (with the same --task-id to inherit its summary)',
      )
    if (location === 'running') throw new LockedError(`task ${row.task_uuid} of job ${id} is running`, 'wait for it to stop, or pause it')
    const kind: JobKind = location === 'paused' || location === 'completed' ? 'resume' : row.kind
    if (kind === 'resume' && location === null)
      throw new CtxError(`task ${row.task_uuid} of job ${id} is not in the tree`, { exitCode: 3, hint: 'check --home; its files may have been deleted' })
    const open = await client.query("SELECT id FROM fleet_jobs WHERE task_uuid = $1 AND id <> $2 AND state IN ('waiting', 'running', 'retrying') LIMIT 1", [
      row.task_uuid,
      id,
    ])
    if (open.rows.length > 0)
      throw new LockedError(
        `task ${row.task_uuid} already has an open job (${String((open.rows[0] as { id: string }).id)})`,
        'see ctxagent jobs --task ' + row.task_uuid.slice(0, 8),
      )
    await client.query(
      `UPDATE fleet_jobs SET state = 'waiting', kind = $2, attempts = 0, claimed_by = NULL, claimed_at = NULL, finished_at = NULL, next_run_at = NULL,
              cancel_requested_at = NULL, outcome = NULL, wait_reason = NULL, wait_cap = NULL, limit_waits = 0, waited_seconds = 0 WHERE id = $1`,
      [id, kind],
    )
    return { task_uuid: row.task_uuid, kind, was: row.state }
  })
}

function notFound(id: number): NotFoundError {
  return new NotFoundError(`there is no job ${id}`, 'see ctxagent jobs (finished jobs expire with fleet.retention_days)')
}

const iso = (v: unknown): string | null => (v instanceof Date ? v.toISOString() : null)

function toRow(r: Record<string, unknown>): JobRow {
  const claimedBy = typeof r.claimed_by === 'string' ? r.claimed_by : null
  return {
    id: Number(r.id),
    state: r.state as JobState,
    kind: r.kind === 'resume' ? 'resume' : 'new',
    task_uuid: String(r.task_uuid),
    user: typeof r.user === 'string' ? r.user : null,
    // A worker's id starts with its host name: its row may have expired.
    host:
      typeof r.hostname === 'string'
        ? r.hostname
        : claimedBy === null
          ? null
          : claimedBy.slice(0, claimedBy.indexOf(':') < 0 ? undefined : claimedBy.indexOf(':')),
    attempts: Number(r.attempts),
    priority: Number(r.priority),
    created_at: iso(r.created_at) ?? '',
    claimed_at: iso(r.claimed_at),
    finished_at: iso(r.finished_at),
    next_run_at: iso(r.next_run_at),
    outcome: typeof r.outcome === 'string' ? r.outcome : null,
    error: typeof r.error === 'string' ? r.error : null,
    key: typeof r.idempotency_key === 'string' ? r.idempotency_key : null,
    cancel_requested: r.cancel_requested_at instanceof Date,
    what: whatOf(r.kind === 'resume' ? 'resume' : 'new', String(r.task_uuid), r.spec),
    waiting_for: r.state === 'retrying' && (r.wait_reason === 'rate-limit' || r.wait_reason === 'budget') ? r.wait_reason : null,
    wait_cap: r.state === 'retrying' && typeof r.wait_cap === 'string' ? r.wait_cap : null,
    waits: Number(r.limit_waits ?? 0),
  }
}

/** A job's `what`: its statement's first line (at most 100 characters), its issue, an eval's trial, or the task it resumes. */
function whatOf(kind: JobKind, uuid: string, spec: unknown): string {
  if (kind === 'resume') return `resume ${uuid.slice(0, 8)}`
  const s = (typeof spec === 'object' && spec !== null ? spec : {}) as Record<string, unknown>
  const trial = s.eval as { id?: unknown; task?: unknown; variant?: unknown; run?: unknown } | undefined
  if (typeof trial === 'object' && trial !== null) return `eval ${String(trial.id)}: ${String(trial.variant)} on ${String(trial.task)} #${String(trial.run)}`
  const text = [s.github, s.gitlab, s.task].find((v): v is string => typeof v === 'string')
  const first =
    (text ?? '')
      .split('\n')
      .find((l) => l.trim() !== '')
      ?.trim() ?? ''
  return first.length > 100 ? `${first.slice(0, 99)}…` : first
}

/** A job's state now; null when there is no such job (it expired). */
export async function jobState(pool: Pool, id: number): Promise<JobState | null> {
  const row = (await pool.query<{ state: JobState }>('SELECT state FROM fleet_jobs WHERE id = $1', [id])).rows[0]
  return row?.state ?? null
}

/**
 * A waiting job whose source withdrew it (its issue lost the label, its pull request merged or
 * closed) ends cancelled; one already claimed runs on. True when one was.
 */
export async function withdrawWaiting(pool: Pool, taskUuid: string): Promise<boolean> {
  const cancelled = await pool.query(
    `UPDATE fleet_jobs SET state = 'cancelled', outcome = 'cancelled', finished_at = now() WHERE task_uuid = $1 AND state = 'waiting'`,
    [taskUuid],
  )
  return (cancelled.rowCount ?? 0) > 0
}
