import type { Pool, PoolClient } from 'pg'

/**
 * A job's history (docs/fleet-operations.md#a-jobs-history): one row of fleet_job_attempts
 * per claim that ended, written in the transaction that ends it (endJob, a handed-back
 * claim, a pass that settles a dead worker's job), so that the history and the job never
 * disagree. A claim handed back untouched (its worker stopping as it claimed) made no
 * attempt and has no row.
 */

/**
 * Why an attempt ended: its task's end (completed, failed, timeout), a pause that waits
 * for someone (paused), a passing LLM failure run again with backoff (outage), a usage
 * limit or a spent budget waited out (rate-limit, budget), its agent dying (died), its
 * worker stopping (stopped), its agent killed before the task began (killed), an operator's
 * cancel (cancelled), a row or host that could not run it (refused).
 */
export type AttemptReason =
  | 'completed'
  | 'failed'
  | 'timeout'
  | 'paused'
  | 'outage'
  /** Its task ended setup_failed: the repository's environment could not be prepared, no LLM request made (docs/environments.md#in-a-fleet). */
  | 'setup_failed'
  | 'rate-limit'
  | 'budget'
  | 'died'
  | 'stopped'
  | 'killed'
  | 'cancelled'
  | 'refused'

export interface AttemptEnd {
  /** What its task became (the job's outcome column). */
  outcome: string
  reason: AttemptReason
  /** With reason budget: the cap. */
  cap?: string | null
  error?: string | null
  /** When the job runs again after a wait (a usage limit lifts, a budget window resets). */
  waitUntil?: Date | string | null
  /** Whether the job, or the resume queued for it, runs again after this attempt. */
  again: boolean
}

/** One attempt as `jobs show` lists it. */
export interface Attempt {
  attempt: number
  worker: string | null
  host: string | null
  started_at: string | null
  ended_at: string
  outcome: string
  reason: AttemptReason
  cap: string | null
  error: string | null
  /** Until when the job waited after it (a usage limit, a budget window). */
  wait_until: string | null
  again: boolean
}

/** Records the end of job `id`'s current claim, read from its row (worker, host, claim time, attempt): before the row's claim is cleared. */
export async function recordAttempt(client: Pool | PoolClient, id: number, end: AttemptEnd): Promise<void> {
  const until = end.waitUntil instanceof Date ? end.waitUntil.toISOString() : (end.waitUntil ?? null)
  await client.query(
    `INSERT INTO fleet_job_attempts (job_id, attempt, worker_id, hostname, started_at, outcome, reason, cap, error, wait_until, again)
     SELECT j.id, j.attempts, j.claimed_by, COALESCE(w.hostname, split_part(j.claimed_by, ':', 1)), j.claimed_at, $2, $3, $4, $5, $6::timestamptz, $7
     FROM fleet_jobs j LEFT JOIN fleet_workers w ON w.id = j.claimed_by WHERE j.id = $1`,
    [id, end.outcome.slice(0, 100), end.reason, end.cap ?? null, end.error?.slice(0, 2000) ?? null, until, end.again],
  )
}

/** Every attempt of a job, oldest first. */
export async function jobAttempts(pool: Pool, id: number): Promise<Attempt[]> {
  const result = await pool.query<Record<string, unknown>>(
    'SELECT attempt, worker_id, hostname, started_at, ended_at, outcome, reason, cap, error, wait_until, again FROM fleet_job_attempts WHERE job_id = $1 ORDER BY id',
    [id],
  )
  const iso = (v: unknown): string | null => (v instanceof Date ? v.toISOString() : null)
  const text = (v: unknown): string | null => (typeof v === 'string' ? v : null)
  return result.rows.map((r) => ({
    attempt: Number(r.attempt),
    worker: text(r.worker_id),
    host: text(r.hostname),
    started_at: iso(r.started_at),
    ended_at: iso(r.ended_at) ?? '',
    outcome: String(r.outcome),
    reason: String(r.reason) as AttemptReason,
    cap: text(r.cap),
    error: text(r.error),
    wait_until: iso(r.wait_until),
    again: r.again === true,
  }))
}
