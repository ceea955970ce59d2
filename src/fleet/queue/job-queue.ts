import type { Pool, PoolClient } from 'pg'
import { inTransaction } from '../../storage/index/pg-pool.js'
import type { ClaimBudget } from './claim-budget.js'
import { claimJob } from './claim-statement.js'
import type { Ended, HandBack, IdleChannel, Job, JobEnd, JobState, KeyHolder, NewJob } from './job.js'
import { endAtOnce, endJob } from './job-end.js'
import { recordAttempt } from './job-history.js'
import { insertJob } from './job-row.js'

/** What a hand-back came to (JobQueue.retry). */
export type HandedBack = 'waiting' | 'cancelled' | 'ended' | 'gone'

/**
 * The fleet's queue in PostgreSQL (docs/contract.md §14.3, §14.4): a job is claimed by one worker in one
 * statement (`FOR UPDATE SKIP LOCKED`: claimers never wait on each other), and a trigger
 * wakes one idle worker whenever a job starts waiting: it NOTIFYs that worker's own
 * channel (fleet_idle), or `ctxagent_jobs` when no worker is idle.
 */
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

  /** The next job due, now this worker's (claim-statement.ts says how: per-user limits, spent caps, idleness). */
  claim(workerId: string, perUser: number | null = null, idle: IdleChannel | null = null, budget: ClaimBudget | null = null): Promise<Job | null> {
    return claimJob(this.pool, workerId, perUser, idle, budget)
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
   * with `last` instead, one cancelled meanwhile ends cancelled. Which of these, or
   * `gone` when this worker no longer holds that claim.
   */
  retry(job: Job, workerId: string, maxAttempts: number, last: HandBack): Promise<HandedBack> {
    return inTransaction(this.pool, async (client) => {
      const held = (
        await client.query<{ cancel: boolean }>(
          `SELECT cancel_requested_at IS NOT NULL AS cancel FROM fleet_jobs WHERE id = $1 AND claimed_by = $2 AND attempts = $3 AND state = 'running' FOR UPDATE`,
          [job.id, workerId, job.attempts],
        )
      ).rows[0]
      if (held === undefined) return 'gone'
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
                finished_at = CASE WHEN cancel_requested_at IS NULL THEN NULL ELSE now() END,
                outcome = CASE WHEN cancel_requested_at IS NULL THEN outcome ELSE 'cancelled' END
         WHERE id = $1 AND claimed_by = $2 AND attempts = $4 AND state = 'running' AND (attempts < $3 OR cancel_requested_at IS NOT NULL)
         RETURNING state`,
        [job.id, workerId, maxAttempts, job.attempts],
      )
      // Cancelled as it was handed back: it ends so (not waiting again).
      if (again.rowCount === 1) return again.rows[0]?.state === 'waiting' ? 'waiting' : 'cancelled'
      await endJob(client, job.id, { ...last, failed: true }, { workerId, attempts: job.attempts })
      return 'ended'
    })
  }

  /**
   * Ends a job this worker holds (see endJob): a plain end (done or failed, no wait, no
   * retry, no cancel asked) in one call, any other in a transaction. Null when the job was
   * no longer this worker's (a reaper settled it).
   */
  async finish(job: Job, workerId: string, end: JobEnd): Promise<Ended | null> {
    const claim = { workerId, attempts: job.attempts }
    return (await endAtOnce(this.pool, job.id, end, claim)) ?? inTransaction(this.pool, (client) => endJob(client, job.id, end, claim))
  }
}
