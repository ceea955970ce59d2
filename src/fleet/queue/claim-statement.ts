import type { Pool } from 'pg'
import type { ClaimBudget } from './claim-budget.js'
import type { IdleChannel, Job } from './job.js'
import { decodeJob, JOB_COLUMNS } from './job-row.js'

/**
 * The next job due (waiting, or retrying with its time come), now this worker's; null when
 * none is. One call of the database's fleet_claim (storage/index/fleet-claim.ts), one round
 * trip, its statements planned once per connection:
 *
 * - With `perUser`, a job whose user already has that many running is passed over: claims
 *   then take turns (a transaction-scoped lock), so that two claimers cannot both see room
 *   for the same user's last slot.
 * - A job whose user is held back by a cost cap is not handed out: with `budget` (the
 *   worker's caps, claim-budget.ts) their spend is read (once per user the claim comes to),
 *   and without it a window their other jobs, or the fleet's, already wait for holds them.
 *   Their due jobs are made to wait for the window in the same call (`retrying`, wait_reason
 *   budget, no attempt spent, until the reset), so that each says why and until when
 *   (docs/fleet-operations.md#waits), and the claim takes the next job.
 * - With `idle` (the worker's own LISTEN channel), the call says whether the worker is idle:
 *   one that found nothing puts its row in fleet_idle (where the next job to wait picks one
 *   worker to wake), one that found a job takes it out.
 * - The claimed job's wait is appended to the queue wait histogram's log and the claim to the
 *   counters' log (storage/index/fleet-tallies.ts): rows of their own, so that claimers wait on no row.
 */
export async function claimJob(
  pool: Pool,
  workerId: string,
  perUser: number | null,
  idle: IdleChannel | null,
  budget: ClaimBudget | null,
): Promise<Job | null> {
  const result = await pool.query<Record<string, unknown>>(`SELECT ${JOB_COLUMNS} FROM fleet_claim($1, $2, $3, $4, $5) j`, [
    workerId,
    perUser,
    idle?.channel ?? null,
    idle?.staleSeconds ?? 0,
    budget === null ? null : JSON.stringify(budget),
  ])
  const row = result.rows[0]
  return row === undefined ? null : decodeJob(row)
}
