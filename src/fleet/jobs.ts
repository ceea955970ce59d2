import type { Pool, PoolClient } from 'pg'
import { inTransaction } from '../storage/index/pg-pool.js'
import { LOCK_KEYS } from '../storage/index/pg-schema.js'
import { CLAIM_WAITED, OBSERVE_CLAIM_WAIT } from '../storage/index/queue-waits.js'
import type { TaskState } from '../storage/task/state.js'
import { spentCapSql } from './claim-budget.js'
import type { ClaimBudget } from './claim-budget.js'
import { recordAttempt } from './job-history.js'
import type { AttemptReason } from './job-history.js'

import type { JobSpec } from './job-spec.js'

export type { JobSpec }

export type JobKind = 'new' | 'resume'
/** docs/contract.md §14.4. waiting, running and retrying are open (a task has at most one open job); the others are finished. */
export const JOB_STATES = ['waiting', 'running', 'retrying', 'done', 'failed', 'cancelled'] as const
export type JobState = (typeof JOB_STATES)[number]
export const OPEN_STATES: readonly JobState[] = ['waiting', 'running', 'retrying']

export interface Job {
  id: number
  task_uuid: string
  kind: JobKind
  spec: JobSpec
  state: JobState
  priority: number
  attempts: number
  claimed_by: string | null
  /** Whose task it is (spec.user, or the OS user who queued it): fleet.limits.per_user counts by it. */
  user: string | null
}

/** fleet.retry: how a task paused by a passing LLM failure is run again. */
export interface RetryPolicy {
  base_seconds: number
  max_seconds: number
  max_attempts: number
  /** A job waiting out usage limits waits at most this long in all (default 24); waits spend no attempt (docs/fleet-operations.md#waits). */
  max_wait_hours?: number
}

/**
 * A task paused until a known time (docs/fleet-operations.md#waits): a usage limit that
 * lifts (rate-limit), a budget whose window resets (budget, with its cap). Its job waits
 * until then, not claimable before, holding no slot and spending no fleet.retry attempt.
 */
export interface LimitWait {
  until: string
  reason: 'rate-limit' | 'budget'
  cap: string | null
  /** The total a job may wait so (fleet.retry.max_wait_hours, for usage limits); null: no cap (a budget's window is the operator's choice). */
  maxWaitSeconds: number | null
}

/**
 * A job's end: what its task became (outcome), and what follows: its resume queued in the
 * same transaction (`resume`), the job run again later (`retry`, a passing LLM failure),
 * or nothing. `failed` says the job itself failed (its task never ran, or never settled).
 */
export interface JobEnd {
  outcome: string
  error?: string | null
  resume?: boolean
  retry?: RetryPolicy
  failed?: boolean
  /** Its task waits until a known time (a usage limit, a budget window): the job waits with it. */
  wait?: LimitWait
  /** Why the attempt ended, for the job's history (default: from the outcome); `cap` with budget. */
  reason?: AttemptReason
  cap?: string | null
}

/** What became of a job once ended: its new state, and, when retrying, in how many seconds it is due. */
export interface Ended {
  state: JobState
  resumed: boolean
  retry_in: number | null
  /** Waiting out a usage limit or a budget (not a retry: no attempt spent). */
  wait?: 'rate-limit' | 'budget'
}

/** How many due jobs, first in the queue's order, a claim looks at to make those of spent caps wait (a bound on its cost). */
const CAP_MARK = 32

const JOB_COLUMNS = 'j.id, j.task_uuid, j.kind, j.spec, j.state, j.priority, j.attempts, j.claimed_by, j."user"'

/**
 * The fleet's queue in PostgreSQL (docs/contract.md §14.3, §14.4): a job is claimed by one worker in one
 * statement (`FOR UPDATE SKIP LOCKED`: claimers never wait on each other), and a trigger
 * wakes one idle worker whenever a job starts waiting: it NOTIFYs that worker's own
 * channel (fleet_idle), or `ctxagent_jobs` when no worker is idle.
 */
/** A claim handed back untouched: what its task became, why (its history's reason), and the error. */
export interface HandBack {
  outcome: string
  error: string
  /** killed before the task began; refused by its agent (a cap spent since the claim, a resume that found its task locked). */
  reason: Extract<AttemptReason, 'killed' | 'refused'>
}

export class JobQueue {
  constructor(readonly pool: Pool) {}

  /** Queues a job; null when its task already has an open one, or its key an open job (a unique index says so, in the same statement). */
  enqueue(job: NewJob, client: Pool | PoolClient = this.pool): Promise<number | null> {
    return insertJob(client, job)
  }

  /**
   * Queues a job with idempotency key `key`, unless a job holds the key: one open, or one
   * that ended done less than `keepSeconds` ago (fleet.key_retention_hours). The holder is
   * read FOR UPDATE: a holder finishing meanwhile is read as it ends (done, still holding
   * the key), never missed. `{ id }` when queued, `{ holder }` when not, null when the
   * insert lost a race to another enqueue of the key (ask again).
   */
  enqueueKeyed(job: NewJob & { key: string }, keepSeconds: number): Promise<{ id: number } | { holder: KeyHolder } | null> {
    return inTransaction(this.pool, async (client) => {
      const found = await client.query<{ id: string; task_uuid: string; state: JobState; finished_at: Date | null }>(
        `SELECT id, task_uuid, state, finished_at FROM fleet_jobs
         WHERE idempotency_key = $1 AND (state IN ('waiting', 'running', 'retrying') OR (state = 'done' AND finished_at > now() - make_interval(secs => $2)))
         ORDER BY id DESC LIMIT 1 FOR UPDATE`,
        [job.key, keepSeconds],
      )
      const row = found.rows[0]
      if (row !== undefined)
        return {
          holder: {
            id: Number(row.id),
            task_uuid: row.task_uuid,
            state: row.state,
            finished_at: row.finished_at instanceof Date ? row.finished_at.toISOString() : null,
          },
        }
      const id = await insertJob(client, job)
      return id === null ? null : { id }
    })
  }

  /**
   * The next job due (waiting, or retrying with its time come), now this worker's; null when
   * none is. With `perUser`, a job whose user already has that many running is passed over:
   * claims then take turns (a transaction-scoped lock), so that two claimers cannot both
   * see room for the same user's last slot.
   *
   * A job whose user's cost cap is spent (another of their jobs waits for a user-daily or
   * user-monthly window to reset; for fleet-daily, anyone's) is passed over until the reset:
   * it waits without taking a slot (docs/fleet-operations.md#waits). With `budget` (the
   * worker's caps, claim-budget.ts) the claim reads the spend too: a job whose cap
   * user_spend says is spent is not handed out, and those of the first CAP_MARK due jobs so
   * passed over are made to wait for the reset in the same statement (`retrying`,
   * wait_reason budget, no attempt spent), so that `jobs` says what they wait for.
   *
   * With `idle` (the worker's own LISTEN channel), the same statement says whether the worker
   * is idle: a claim that found nothing puts its row in fleet_idle (where the next job to
   * wait picks one worker to wake), one that found a job takes it out. Without a per-user
   * limit it is one statement, one round trip. The same statement observes the claimed job's
   * wait in the queue wait histogram's totals (storage/index/queue-waits.ts).
   */
  claim(workerId: string, perUser: number | null = null, idle: IdleChannel | null = null, budget: ClaimBudget | null = null): Promise<Job | null> {
    const due = (t: string) => `(${t}.state = 'waiting' OR (${t}.state = 'retrying' AND ${t}.next_run_at <= now()))`
    const sql = `WITH spent AS (
         SELECT c.id, ${spentCapSql('c."user"', '$5::jsonb')} AS cap FROM fleet_jobs c
         WHERE $5::jsonb IS NOT NULL AND ${due('c')} ORDER BY c.priority DESC, c.id LIMIT ${CAP_MARK}),
       held AS (
         UPDATE fleet_jobs h SET state = 'retrying', wait_reason = 'budget', wait_cap = spent.cap,
                next_run_at = greatest(($5::jsonb->>CASE spent.cap WHEN 'user-monthly' THEN 'monthly_until' ELSE 'daily_until' END)::timestamptz, now() + interval '1 second')
         FROM spent WHERE h.id = spent.id AND spent.cap IS NOT NULL AND ${due('h')}
           -- Rows another claim holds are left to the next claim: claimers never wait on each other.
           AND h.id IN (SELECT l.id FROM fleet_jobs l WHERE l.id IN (SELECT id FROM spent WHERE cap IS NOT NULL) AND ${due('l')} FOR UPDATE SKIP LOCKED)),
       claimed AS (
         UPDATE fleet_jobs j SET state = 'running', claimed_by = $1, claimed_at = now(), attempts = j.attempts + 1, next_run_at = NULL
         WHERE j.id = (
           SELECT c.id FROM fleet_jobs c
           WHERE ${due('c')} AND ${spentCapSql('c."user"', '$5::jsonb')} IS NULL
             AND ($2::int IS NULL OR c."user" IS NULL
                  OR (SELECT count(*) FROM fleet_jobs r WHERE r.state = 'running' AND r."user" = c."user") < $2::int)
             AND NOT EXISTS (SELECT 1 FROM fleet_jobs b WHERE b.state = 'retrying' AND b.next_run_at > now() AND b.wait_reason = 'budget'
                             AND (b.wait_cap = 'fleet-daily' OR (b.wait_cap IN ('user-daily', 'user-monthly') AND b."user" = c."user")))
           ORDER BY c.priority DESC, c.id FOR UPDATE SKIP LOCKED LIMIT 1)
         RETURNING ${JOB_COLUMNS}, ${CLAIM_WAITED}),
       observed AS (${OBSERVE_CLAIM_WAIT}),
       busy AS (DELETE FROM fleet_idle WHERE $3::text IS NOT NULL AND channel = $3 AND EXISTS (SELECT 1 FROM claimed)),
       idle AS (INSERT INTO fleet_idle (channel, worker_id, stale_seconds) SELECT $3, $1, $4 WHERE $3::text IS NOT NULL AND NOT EXISTS (SELECT 1 FROM claimed)
                ON CONFLICT (channel) DO NOTHING)
       SELECT * FROM claimed j`
    const params = [workerId, perUser, idle?.channel ?? null, idle?.staleSeconds ?? 0, budget === null ? null : JSON.stringify(budget)]
    const decode = (rows: Record<string, unknown>[]): Job | null => (rows[0] === undefined ? null : decodeJob(rows[0]))
    if (perUser === null) return this.pool.query<Record<string, unknown>>(sql, params).then((r) => decode(r.rows))
    return inTransaction(this.pool, async (client) => {
      await client.query('SELECT pg_advisory_xact_lock($1)', [LOCK_KEYS.claimPerUser])
      return decode((await client.query<Record<string, unknown>>(sql, params)).rows)
    })
  }

  /** A wake-up this worker cannot use (no free slot, or stopping) goes to another idle worker (or to all, when none is). */
  async passWake(): Promise<void> {
    await this.pool.query('SELECT fleet_wake_idle()')
  }

  /** This worker is no longer idle anywhere (it stops). */
  async leaveIdle(channel: string): Promise<void> {
    await this.pool.query('DELETE FROM fleet_idle WHERE channel = $1', [channel])
  }

  /** Seconds until the first retrying job is due (0 when one is), or null when none retries. */
  async nextDue(): Promise<number | null> {
    const result = await this.pool.query<{ secs: number | null }>(
      `SELECT extract(epoch FROM min(next_run_at) - now())::float AS secs FROM fleet_jobs WHERE state = 'retrying'`,
    )
    const secs = result.rows[0]?.secs
    return secs === null || secs === undefined ? null : Math.max(0, Number(secs))
  }

  /**
   * Whether a job this worker claimed may start (docs/fleet.md#cancelling-a-job: a cancelled job never runs):
   * 'cancelled' when an operator cancelled it since the claim, 'gone' when it is no
   * longer this claim's (a reaper handed it back), else 'run'.
   */
  async mayStart(job: Job, workerId: string): Promise<'run' | 'cancelled' | 'gone'> {
    const result = await this.pool.query<{ cancelled: boolean }>(
      `SELECT cancel_requested_at IS NOT NULL AS cancelled FROM fleet_jobs WHERE id = $1 AND claimed_by = $2 AND attempts = $3 AND state = 'running'`,
      [job.id, workerId, job.attempts],
    )
    const row = result.rows[0]
    return row === undefined ? 'gone' : row.cancelled ? 'cancelled' : 'run'
  }

  /** This worker's claims (job id and attempt) that an operator cancelled while they run. */
  async cancelledClaims(workerId: string): Promise<{ id: number; attempts: number }[]> {
    const result = await this.pool.query<{ id: string; attempts: number }>(
      `SELECT id, attempts FROM fleet_jobs WHERE claimed_by = $1 AND state = 'running' AND cancel_requested_at IS NOT NULL`,
      [workerId],
    )
    return result.rows.map((r) => ({ id: Number(r.id), attempts: Number(r.attempts) }))
  }

  /** Hands a claimed job back untouched (claimed as its worker was stopping). */
  async release(job: Job, workerId: string): Promise<void> {
    await this.pool.query(
      `UPDATE fleet_jobs SET state = 'waiting', claimed_by = NULL, claimed_at = NULL, attempts = attempts - 1 WHERE id = $1 AND claimed_by = $2 AND attempts = $3 AND state = 'running'`,
      [job.id, workerId, job.attempts],
    )
  }

  /**
   * Hands a claimed job back to wait again with its attempt counted (its agent was
   * killed before its task began: nothing ran); one that has had `maxAttempts` fails
   * with `last` instead. True when it waits again.
   */
  retry(job: Job, workerId: string, maxAttempts: number, last: HandBack): Promise<boolean> {
    return inTransaction(this.pool, async (client) => {
      const held = (
        await client.query<{ cancel: boolean }>(
          `SELECT cancel_requested_at IS NOT NULL AS cancel FROM fleet_jobs WHERE id = $1 AND claimed_by = $2 AND attempts = $3 AND state = 'running' FOR UPDATE`,
          [job.id, workerId, job.attempts],
        )
      ).rows[0]
      if (held === undefined) return false
      if (held.cancel || job.attempts < maxAttempts) {
        await recordAttempt(client, job.id, {
          outcome: held.cancel ? 'cancelled' : 'not begun',
          reason: held.cancel ? 'cancelled' : last.reason,
          error: last.error,
          again: !held.cancel,
        })
      }
      const again = await client.query(
        `UPDATE fleet_jobs SET state = CASE WHEN cancel_requested_at IS NULL THEN 'waiting' ELSE 'cancelled' END, claimed_by = NULL, claimed_at = NULL,
                finished_at = CASE WHEN cancel_requested_at IS NULL THEN NULL ELSE now() END
         WHERE id = $1 AND claimed_by = $2 AND attempts = $4 AND state = 'running' AND (attempts < $3 OR cancel_requested_at IS NOT NULL)`,
        [job.id, workerId, maxAttempts, job.attempts],
      )
      if (again.rowCount === 1) return true
      await endJob(client, job.id, { ...last, failed: true }, { workerId, attempts: job.attempts })
      return false
    })
  }

  /**
   * Ends a job this worker holds (see endJob). Null when the job was no longer this
   * worker's (a reaper settled it).
   */
  finish(job: Job, workerId: string, end: JobEnd): Promise<Ended | null> {
    return inTransaction(this.pool, (client) => endJob(client, job.id, end, { workerId, attempts: job.attempts }))
  }
}

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
    await client.query(
      `UPDATE fleet_jobs SET state = 'retrying', kind = 'resume', next_run_at = now() + make_interval(secs => $2), outcome = $3, error = $4, wait_reason = NULL, wait_cap = NULL WHERE id = $1`,
      [id, delay, end.outcome, error],
    )
    return { state: 'retrying', resumed: false, retry_in: delay }
  }
  const exhausted = end.retry !== undefined
  const state: JobState = exhausted || end.failed === true ? 'failed' : 'done'
  const why = exhausted ? `${error ?? 'the LLM side failed'} (attempt ${counted} of fleet.retry.max_attempts ${end.retry?.max_attempts})`.slice(0, 2000) : error
  const resume = state === 'done' && end.resume === true
  await recordAttempt(client, id, {
    ...history,
    error: why,
    reason: end.reason ?? (exhausted ? 'outage' : reasonOf(end.outcome, resume, end.failed === true)),
    again: resume,
  })
  await client.query(`UPDATE fleet_jobs SET state = $2, finished_at = now(), outcome = $3, error = $4, wait_reason = NULL, wait_cap = NULL WHERE id = $1`, [
    id,
    state,
    end.outcome,
    why,
  ])
  if (resume) await insertJob(client, { task_uuid: job.task_uuid, kind: 'resume', spec: job.spec, priority: job.priority, user: job.user })
  return { state, resumed: resume, retry_in: null }
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
  if (outcome === 'completed' || outcome === 'timeout' || outcome === 'died' || outcome === 'cancelled') return outcome
  if (outcome === 'paused') return resumed ? 'stopped' : 'paused'
  return failed || outcome === 'failed' ? 'failed' : 'paused'
}

/**
 * One claim of a job: its worker and the attempt it made. A worker acts on a job only in the
 * claim it holds: a later claim of the same job (a pass handed it back while the worker was
 * frozen, and the worker claimed it again) is not ended, retried or released by what the
 * earlier one's child did.
 */
export interface Claim {
  workerId: string
  attempts: number
}

/** The job an idempotency key returned: open, or done within fleet.key_retention_hours. */
export interface KeyHolder {
  id: number
  task_uuid: string
  state: JobState
  finished_at: string | null
}

/** An idle worker's own LISTEN channel, and how long after its last heartbeat it is taken for gone (its row then passed over). */
export interface IdleChannel {
  channel: string
  staleSeconds: number
}

export interface NewJob {
  task_uuid: string
  kind: JobKind
  spec: JobSpec
  priority?: number
  user?: string | null
  /** An idempotency key (enqueue --key): no second open job may hold it. */
  key?: string | null
}

export async function insertJob(client: Pool | PoolClient, job: NewJob): Promise<number | null> {
  const result = await client.query<{ id: string }>(
    `INSERT INTO fleet_jobs (task_uuid, kind, spec, priority, "user", idempotency_key) VALUES ($1, $2, $3, $4, $5, $6)
     ON CONFLICT DO NOTHING RETURNING id`,
    [job.task_uuid, job.kind, JSON.stringify(job.spec), job.priority ?? 0, job.user ?? job.spec.user ?? null, job.key ?? null],
  )
  const row = result.rows[0]
  return row === undefined ? null : Number(row.id)
}

/** Paused by its LLM failing in a way that may pass (state.llm_failure); a task from before that field, paused by the LLM, counts too. */
export function llmOutage(state: TaskState | null): boolean {
  return state?.paused_by === 'llm' && (state.llm_failure === undefined || state.llm_failure !== null)
}

/** base × 2^(attempt−1), at most max, then between half of it and all of it (jitter: retries of one outage spread out). */
export function backoffSeconds(policy: RetryPolicy, attempt: number, random: () => number = Math.random): number {
  const full = Math.min(policy.max_seconds, policy.base_seconds * 2 ** Math.max(0, attempt - 1))
  return full / 2 + (full / 2) * random()
}

/** A row as it is: whether it can be run is the worker's to check (jobProblem), not taken for granted here. */
export function decodeJob(row: Record<string, unknown>): Job {
  return {
    id: Number(row.id),
    task_uuid: String(row.task_uuid),
    kind: String(row.kind) as JobKind,
    spec: (row.spec ?? {}) as JobSpec,
    state: row.state as JobState,
    priority: Number(row.priority),
    attempts: Number(row.attempts),
    claimed_by: (row.claimed_by as string | null) ?? null,
    user: typeof row.user === 'string' ? row.user : null,
  }
}
