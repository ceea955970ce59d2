import type { Pool } from 'pg'

/**
 * The queue wait histogram (docs/serve.md#metrics, `ctxagent_queue_wait_seconds`): each claim
 * observes once how long its job had been claimable, in the claim's own call (fleet-claim.ts's
 * fleet_claim appends it to the log that readers roll up, fleet-tallies.ts), into running
 * totals that nothing deletes, so that its count, sum and buckets never fall (not when cleanup
 * expires jobs, not when a waiting job is claimed).
 *
 * A job is claimable from `fleet_jobs.ready_at`, which a trigger keeps: the time it began to wait
 * (queued, or handed back to wait again: a retry by an operator, a job released or sent back by
 * its worker or a reaper), or, while it is retrying, the time its retry or its wait (a usage
 * limit, a budget window) comes due (next_run_at). Time held back by fleet.limits.per_user is
 * waiting time too; a job the claim makes wait for a cap's reset is retrying, from the reset.
 */

/** Upper bounds (seconds) of the buckets: a second to four hours; the last row, +Inf. */
export const QUEUE_WAIT_BUCKETS = [1, 5, 15, 60, 300, 900, 1800, 3600, 14_400] as const

/** The migration: the column and its trigger (open jobs from before: from their creation, or their due time), and the totals' rows. */
export const PG_QUEUE_WAITS_MIGRATION = `
  ALTER TABLE fleet_jobs ADD COLUMN IF NOT EXISTS ready_at TIMESTAMPTZ;
  UPDATE fleet_jobs SET ready_at = CASE WHEN state = 'retrying' THEN next_run_at ELSE created_at END WHERE ready_at IS NULL AND state IN ('waiting', 'retrying');
  CREATE OR REPLACE FUNCTION fleet_jobs_ready() RETURNS trigger LANGUAGE plpgsql AS $$
  BEGIN
    IF NEW.state = 'waiting' AND (TG_OP = 'INSERT' OR OLD.state IS DISTINCT FROM 'waiting') THEN
      NEW.ready_at := now();
    ELSIF NEW.state = 'retrying' AND NEW.next_run_at IS NOT NULL THEN
      NEW.ready_at := NEW.next_run_at;
    END IF;
    RETURN NEW;
  END $$;
  DROP TRIGGER IF EXISTS fleet_jobs_ready ON fleet_jobs;
  CREATE TRIGGER fleet_jobs_ready BEFORE INSERT OR UPDATE OF state, next_run_at ON fleet_jobs FOR EACH ROW EXECUTE FUNCTION fleet_jobs_ready();
  CREATE TABLE IF NOT EXISTS fleet_queue_waits (le DOUBLE PRECISION PRIMARY KEY, n BIGINT NOT NULL DEFAULT 0, sum_seconds DOUBLE PRECISION NOT NULL DEFAULT 0);
  INSERT INTO fleet_queue_waits (le) VALUES ${[...QUEUE_WAIT_BUCKETS, "'Infinity'"].map((le) => `(${le})`).join(', ')} ON CONFLICT (le) DO NOTHING;`

/** One bucket's row: its upper bound (Infinity: the last), the claims whose wait fell in it, their waits' sum. */
export interface QueueWaitRow {
  le: number
  n: number
  sum_seconds: number
}

/** The log's waits in their buckets, beside the totals (fleet-tallies.ts): read in one statement, one snapshot. */
const TOTALS_AND_LOG = `
  SELECT w.le, w.n + COALESCE(l.n, 0) AS n, w.sum_seconds + COALESCE(l.total, 0) AS sum_seconds
  FROM fleet_queue_waits w LEFT JOIN (
    SELECT (SELECT min(b.le) FROM fleet_queue_waits b WHERE b.le >= x.waited) AS le, count(*) AS n, sum(x.waited) AS total
    FROM fleet_queue_wait_log x GROUP BY 1) l ON l.le = w.le
  ORDER BY w.le`

/** The totals, by bucket (the rolled-up totals and the log since); none when the schema is older than them (its claims observe nothing yet). */
export async function queueWaitTotals(pool: Pool): Promise<QueueWaitRow[]> {
  for (const sql of [TOTALS_AND_LOG, 'SELECT le, n, sum_seconds FROM fleet_queue_waits ORDER BY le']) {
    try {
      const rows = await pool.query<{ le: number; n: string; sum_seconds: number }>(sql)
      return rows.rows.map((r) => ({ le: Number(r.le), n: Number(r.n), sum_seconds: Number(r.sum_seconds) }))
    } catch (err) {
      // 42P01: a table older schemas lack (the log, then the totals).
      if ((err as { code?: string }).code !== '42P01') throw err
    }
  }
  return []
}
