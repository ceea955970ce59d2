import type { Pool } from 'pg'
import { inTransaction } from '../../storage/index/pg-pool.js'
import { LOCK_KEYS } from '../../storage/index/pg-schema.js'
import { CLAIM_WAITED, OBSERVE_CLAIM_WAIT } from '../../storage/index/queue-waits.js'
import { fleetCappedSql, fleetSpendSql, spentCapSql } from './claim-budget.js'
import type { ClaimBudget } from './claim-budget.js'
import type { IdleChannel, Job } from './job.js'
import { decodeJob, JOB_COLUMNS } from './job-row.js'

/** How many due jobs, first in the queue's order, a claim looks at to make those of spent caps wait (a bound on its cost). */
const CAP_MARK = 32

/**
 * The next job due (waiting, or retrying with its time come), now this worker's; null when
 * none is. With `perUser`, a job whose user already has that many running is passed over:
 * claims then take turns (a transaction-scoped lock), so that two claimers cannot both
 * see room for the same user's last slot.
 *
 * A job whose user's cost cap is spent (another of their jobs waits for a user-daily or
 * user-monthly window to reset; for fleet-daily, anyone's) is passed over until the reset:
 * it waits without taking a slot (docs/fleet-operations.md#waits); with `budget`, those of
 * the first CAP_MARK due jobs are made to wait for that window, until the same time
 * (storage/index/spend.ts's fleet_claim_head), so that none stays `waiting` without a reason. With `budget` (the
 * worker's caps, claim-budget.ts) the claim reads the spend too: a job whose cap
 * user_spend says is spent is not handed out, and those of the first CAP_MARK due jobs so
 * passed over are made to wait for the reset in the same statement (`retrying`,
 * wait_reason budget, no attempt spent), so that `jobs` says what they wait for. The
 * spend is read once per user of those first jobs (`users`), and for a job past them only
 * when the claim comes to it (all before it taken or held).
 *
 * With `idle` (the worker's own LISTEN channel), the same statement says whether the worker
 * is idle: a claim that found nothing puts its row in fleet_idle (where the next job to
 * wait picks one worker to wake), one that found a job takes it out. Without a per-user
 * limit it is one statement, one round trip. The same statement observes the claimed job's
 * wait in the queue wait histogram's log (storage/index/queue-waits.ts): a row of its own,
 * as the claims counter's (storage/index/fleet-tallies.ts), so that claimers wait on no row.
 */
export function claimJob(pool: Pool, workerId: string, perUser: number | null, idle: IdleChannel | null, budget: ClaimBudget | null): Promise<Job | null> {
  const sql = budget === null ? UNCAPPED : CAPPED
  const params = [workerId, perUser, idle?.channel ?? null, idle?.staleSeconds ?? 0, budget === null ? null : JSON.stringify(budget)]
  const decode = (rows: Record<string, unknown>[]): Job | null => (rows[0] === undefined ? null : decodeJob(rows[0]))
  if (perUser === null) return pool.query<Record<string, unknown>>(sql, params).then((r) => decode(r.rows))
  return inTransaction(pool, async (client) => {
    await client.query('SELECT pg_advisory_xact_lock($1)', [LOCK_KEYS.claimPerUser])
    return decode((await client.query<Record<string, unknown>>(sql, params)).rows)
  })
}

/**
 * The claim's statement, with or without the caps' reads (without them, a worker with no
 * money cap configured: the shorter statement costs less to plan at every claim). Parameters:
 * $1 worker, $2 per-user limit, $3 idle channel, $4 its staleness, $5 the ClaimBudget (jsonb).
 */
function claimSql(budget: boolean): string {
  const capsFirst = `WITH fleet AS MATERIALIZED (SELECT ${fleetSpendSql('$5::jsonb')} AS usd),
       head AS MATERIALIZED (SELECT * FROM fleet_claim_head($5::jsonb, ${CAP_MARK})),
       held AS (
         UPDATE fleet_jobs h SET state = 'retrying', wait_reason = 'budget', wait_cap = head.cap,
                next_run_at = greatest(COALESCE(head.until, ($5::jsonb->>CASE head.cap WHEN 'user-monthly' THEN 'monthly_until' ELSE 'daily_until' END)::timestamptz), now() + interval '1 second')
         FROM head WHERE h.id = head.id AND head.cap <> '' AND ${due('h')}
           -- Rows another claim holds are left to the next claim: claimers never wait on each other.
           AND h.id IN (SELECT l.id FROM fleet_jobs l WHERE l.id IN (SELECT head.id FROM head WHERE head.cap <> '') AND ${due('l')} FOR UPDATE SKIP LOCKED)),`
  const capped = `
             AND COALESCE((SELECT h.cap FROM head h WHERE h.id = c.id),
                          ${spentCapSql('c', '$5::jsonb', '(SELECT usd FROM fleet)')}, '') = ''`
  return `${
    budget
      ? `${capsFirst}
      `
      : 'WITH '
  }claimed AS (
         UPDATE fleet_jobs j SET state = 'running', claimed_by = $1, claimed_at = now(), attempts = j.attempts + 1, next_run_at = NULL
         WHERE j.id = (
           SELECT c.id FROM fleet_jobs c
           WHERE ${due('c')}${budget ? capped : ''}
             AND ($2::int IS NULL OR c."user" IS NULL
                  OR (SELECT count(*) FROM fleet_jobs r WHERE r.state = 'running' AND r."user" = c."user") < $2::int)
             AND NOT EXISTS (SELECT 1 FROM fleet_jobs b WHERE b.state = 'retrying' AND b.next_run_at > now() AND b.wait_reason = 'budget'
                             AND ((b.wait_cap = 'fleet-daily' AND ${fleetCappedSql('c."user"', '$5::jsonb')}) OR (b.wait_cap IN ('user-daily', 'user-monthly') AND b."user" = c."user")))
           ORDER BY c.priority DESC, c.id FOR UPDATE SKIP LOCKED LIMIT 1)
         RETURNING ${JOB_COLUMNS}, ${CLAIM_WAITED}),
       observed AS (${OBSERVE_CLAIM_WAIT}),
       busy AS (DELETE FROM fleet_idle WHERE $3::text IS NOT NULL AND channel = $3 AND EXISTS (SELECT 1 FROM claimed)),
       idle AS (INSERT INTO fleet_idle (channel, worker_id, stale_seconds) SELECT $3, $1, $4 WHERE $3::text IS NOT NULL AND NOT EXISTS (SELECT 1 FROM claimed)
                ON CONFLICT (channel) DO NOTHING)
       SELECT * FROM claimed j`
}

// In the order of idx_fleet_jobs_claimable (waiting or retrying): the claim reads the first due jobs, not all.
function due(t: string): string {
  return `(${t}.state IN ('waiting', 'retrying') AND (${t}.state = 'waiting' OR ${t}.next_run_at <= now()))`
}

const UNCAPPED = claimSql(false)
const CAPPED = claimSql(true)
