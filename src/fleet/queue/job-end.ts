import type { Pool, PoolClient } from 'pg'
import type { Claim, Ended, JobEnd, JobState, LimitWait } from './job.js'
import { recordAttempt } from './job-history.js'
import type { AttemptReason } from './job-history.js'
import { decodeJob, insertJob, JOB_COLUMNS } from './job-row.js'
import { backoffSeconds } from './retry-policy.js'

/**
 * Ends a running job in the caller's transaction, from what its task became: cancelled
 * when an operator asked; retrying (due after the backoff) for a passing LLM failure while
 * attempts remain, failed after the last; else done (or failed), with its resume queued in
 * the same transaction when `end.resume`, so that a stop between the two can neither lose it
 * nor queue it twice. Null when the job was not running (or, with `claim`, not in that claim).
 */
export async function endJob(client: PoolClient, id: number, end: JobEnd, claim: Claim | null = null): Promise<Ended | null> {
  const found = await client.query<Record<string, unknown>>(
    `SELECT ${JOB_COLUMNS}, j.cancel_requested_at, j.limit_waits, j.waited_seconds FROM fleet_jobs j WHERE j.id = $1 AND j.state = 'running' AND ($2::text IS NULL OR (j.claimed_by = $2 AND j.attempts = $3)) FOR UPDATE`,
    [id, claim?.workerId ?? null, claim?.attempts ?? null],
  )
  const row = found.rows[0]
  if (row === undefined) return null
  const job = decodeJob(row)
  const error = end.error?.slice(0, 2000) ?? null
  const history = { outcome: end.outcome, error, cap: end.cap ?? end.wait?.cap ?? null }
  if (row.cancel_requested_at !== null && row.cancel_requested_at !== undefined) {
    await recordAttempt(client, id, { ...history, reason: 'cancelled', again: false })
    await client.query(`UPDATE fleet_jobs SET state = 'cancelled', finished_at = now(), outcome = $2, error = COALESCE($3, error) WHERE id = $1`, [
      id,
      end.outcome,
      error,
    ])
    return { state: 'cancelled', resumed: false, retry_in: null }
  }
  if (end.wait !== undefined) return waitOut(client, id, end.wait, history, Number(row.waited_seconds ?? 0))
  // Claims that ended waiting out a limit spent no attempt.
  const counted = job.attempts - Number(row.limit_waits ?? 0)
  if (end.retry !== undefined && counted < end.retry.max_attempts) {
    const delay = backoffSeconds(end.retry, counted)
    await recordAttempt(client, id, { ...history, reason: end.reason ?? 'outage', again: true })
    // A fresh retry is a new task (a setup that failed: its task ended, its record stays); any other resumes its task.
    await client.query(
      `UPDATE fleet_jobs SET state = 'retrying', kind = CASE WHEN $5 THEN 'new' ELSE 'resume' END, task_uuid = CASE WHEN $5 THEN gen_random_uuid()::text ELSE task_uuid END,
              next_run_at = now() + make_interval(secs => $2), outcome = $3, error = $4, wait_reason = NULL, wait_cap = NULL WHERE id = $1`,
      [id, delay, end.outcome, error, end.fresh === true],
    )
    return { state: 'retrying', resumed: false, retry_in: delay }
  }
  const exhausted = end.retry !== undefined
  const plain = plainEnd(end)
  const state: JobState = exhausted ? 'failed' : plain.state
  const why = exhausted ? `${error ?? 'the LLM side failed'} (attempt ${counted} of fleet.retry.max_attempts ${end.retry?.max_attempts})`.slice(0, 2000) : error
  const resume = !exhausted && plain.resume
  await recordAttempt(client, id, { ...history, error: why, reason: exhausted ? (end.reason ?? 'outage') : plain.reason, again: resume })
  await client.query(`UPDATE fleet_jobs SET state = $2, finished_at = now(), outcome = $3, error = $4, wait_reason = NULL, wait_cap = NULL WHERE id = $1`, [
    id,
    state,
    end.outcome,
    why,
  ])
  if (resume) await insertJob(client, { task_uuid: job.task_uuid, kind: 'resume', spec: job.spec, priority: job.priority, user: job.user })
  return { state, resumed: resume, retry_in: null }
}

/** An end that is neither a wait nor a retry: done (or failed), its resume queued or not, and why, for the job's history. */
interface PlainEnd {
  state: 'done' | 'failed'
  error: string | null
  reason: AttemptReason
  cap: string | null
  resume: boolean
}

/** What `end` comes to when it neither waits nor is retried (and no cancel was asked): endJob's last branch, and endAtOnce's. */
function plainEnd(end: JobEnd): PlainEnd {
  const state = end.failed === true ? 'failed' : 'done'
  const resume = state === 'done' && end.resume === true
  return {
    state,
    error: end.error?.slice(0, 2000) ?? null,
    reason: end.reason ?? reasonOf(end.outcome, resume, end.failed === true),
    cap: end.cap ?? end.wait?.cap ?? null,
    resume,
  }
}

/**
 * Ends the claim `claim` of job `id` at once, in one call of the database's fleet_end
 * (storage/index/fleet-claim.ts: the row, its history and its resume in one statement's
 * transaction), when its end is plain (no wait, no retry) and no cancel was asked: what
 * endJob would do, in one round trip. Null when it did not (another end, a cancel, or the
 * claim no longer the worker's): endJob in a transaction then says which.
 */
export async function endAtOnce(pool: Pool, id: number, end: JobEnd, claim: Claim): Promise<Ended | null> {
  if (end.wait !== undefined || end.retry !== undefined) return null
  const plain = plainEnd(end)
  const ended = await pool.query<{ ended: boolean }>('SELECT fleet_end($1, $2, $3, $4, $5, $6, $7, $8, $9) AS ended', [
    id,
    claim.workerId,
    claim.attempts,
    plain.state,
    end.outcome,
    plain.error,
    plain.reason,
    plain.cap,
    plain.resume,
  ])
  return ended.rows[0]?.ended === true ? { state: plain.state, resumed: plain.resume, retry_in: null } : null
}

/**
 * A job whose task waits until a known time: `retrying` with wait_reason until then (the
 * claim's `next_run_at <= now()` keeps every worker off it, its slot free meanwhile), its
 * claim counted as a wait, not an attempt. A usage limit that would make the job's waits
 * pass `maxWaitSeconds` in all fails the job instead (its task stays paused, resumable).
 */
async function waitOut(
  client: PoolClient,
  id: number,
  wait: LimitWait,
  history: { outcome: string; error: string | null; cap: string | null },
  waited: number,
): Promise<Ended> {
  const secs = Math.max(
    0,
    Number((await client.query<{ secs: number }>('SELECT extract(epoch FROM $1::timestamptz - now())::float AS secs', [wait.until])).rows[0]?.secs ?? 0),
  )
  if (wait.maxWaitSeconds !== null && waited + secs > wait.maxWaitSeconds) {
    const why =
      `${history.error ?? 'a usage limit'}; it lifts at ${wait.until}, past fleet.retry.max_wait_hours (${+(wait.maxWaitSeconds / 3600).toFixed(2)} h of waiting in all; ${+(waited / 3600).toFixed(2)} h so far)`.slice(
        0,
        2000,
      )
    await recordAttempt(client, id, { ...history, error: why, reason: wait.reason, again: false })
    await client.query(
      `UPDATE fleet_jobs SET state = 'failed', finished_at = now(), outcome = $2, error = $3, wait_reason = NULL, wait_cap = NULL WHERE id = $1`,
      [id, history.outcome, why],
    )
    return { state: 'failed', resumed: false, retry_in: null }
  }
  await recordAttempt(client, id, { ...history, reason: wait.reason, waitUntil: wait.until, again: true })
  await client.query(
    `UPDATE fleet_jobs SET state = 'retrying', kind = 'resume', next_run_at = greatest(now(), $2::timestamptz), wait_reason = $3, wait_cap = $4,
            limit_waits = limit_waits + 1, waited_seconds = waited_seconds + $5, outcome = $6, error = $7 WHERE id = $1`,
    [id, wait.until, wait.reason, wait.cap, secs, history.outcome, history.error],
  )
  return { state: 'retrying', resumed: false, retry_in: secs, wait: wait.reason }
}

/** An attempt's reason from what its task became, when its end does not say. */
function reasonOf(outcome: string, resumed: boolean, failed: boolean): AttemptReason {
  // Its task completed; only its delivery did not happen (the job's outcome and error say so).
  if (outcome === 'undelivered') return 'completed'
  if (outcome === 'completed' || outcome === 'timeout' || outcome === 'died' || outcome === 'cancelled') return outcome
  if (outcome === 'paused') return resumed ? 'stopped' : 'paused'
  return failed || outcome === 'failed' ? 'failed' : 'paused'
}

/**
 * A running job whose agent died before it created its task waits again (the attempt recorded
 * as not begun), while attempts remain and no cancel came; false when it may not.
 */
export async function requeueNotBegun(client: PoolClient, jobId: number, maxAttempts: number): Promise<boolean> {
  const held =
    (
      await client.query(`SELECT 1 FROM fleet_jobs WHERE id = $1 AND state = 'running' AND attempts < $2 AND cancel_requested_at IS NULL FOR UPDATE`, [
        jobId,
        maxAttempts,
      ])
    ).rowCount === 1
  if (held) await recordAttempt(client, jobId, { outcome: 'not begun', reason: 'died', error: 'its agent died before the task was created', again: true })
  const again = await client.query(
    `UPDATE fleet_jobs SET state = 'waiting', claimed_by = NULL, claimed_at = NULL WHERE id = $1 AND state = 'running' AND attempts < $2 AND cancel_requested_at IS NULL`,
    [jobId, maxAttempts],
  )
  return again.rowCount === 1
}
