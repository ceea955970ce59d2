import type { Pool, PoolClient } from 'pg'

/** The roll-ups' advisory lock key (pg-schema.ts's LOCK_KEYS.rollUp): transaction-scoped, as every lock of the fleet's (docs/contract.md §14.5). */
export const ROLL_UP_LOCK = 0x637478_05

/**
 * The fleet's running totals kept off the claim's path (docs/formats.md#fleet-tallies): the
 * queue wait histogram (queue-waits.ts) and the counters (fleet-counters.ts) were rows that
 * every claim and every end updated, one row for all (a bucket, a host, an outcome), so that
 * claimers queued on their row locks. Now each event appends a row of its own to a log
 * (`fleet_queue_wait_log`, `fleet_counter_log`: no key, nothing to wait on), and a reader
 * sums the totals and the log in one statement. A roll-up moves the log into the totals:
 * its delete and its additions in one transaction, so that a reader (one snapshot) sees an
 * event in the log or in the totals, never both, never neither: the totals never fall and
 * each event counts once. Roll-ups take turns (a transaction-scoped advisory lock; one that
 * finds it taken leaves the log to that one). The watch-locks pass and the readers (/metrics,
 * serve) roll up; the log holds what came since.
 *
 * The migration adds the logs, makes the counters' one adding function append (the triggers
 * call it: every path that counts now appends), and gives the claim an index in its order
 * over every job it may take (waiting and retrying), so that it reads the first of them,
 * not all. Nothing is copied: the totals stay as they are, and a transaction that added to
 * them under the old function before the migration committed is counted there, once.
 */
export const PG_FLEET_TALLIES_MIGRATION = `
  CREATE TABLE IF NOT EXISTS fleet_queue_wait_log (waited DOUBLE PRECISION NOT NULL);
  CREATE TABLE IF NOT EXISTS fleet_counter_log (name TEXT NOT NULL, label TEXT NOT NULL);
  CREATE OR REPLACE FUNCTION fleet_counters_add(TEXT, TEXT) RETURNS void LANGUAGE sql AS $$
    INSERT INTO fleet_counter_log (name, label) VALUES ($1, $2)
  $$;
  CREATE OR REPLACE FUNCTION fleet_tallies_roll_up() RETURNS boolean LANGUAGE plpgsql AS $$
  BEGIN
    IF NOT pg_try_advisory_xact_lock(${ROLL_UP_LOCK}) THEN RETURN false; END IF;
    WITH moved AS (DELETE FROM fleet_counter_log RETURNING name, label)
    INSERT INTO fleet_counters (name, label, n) SELECT name, label, count(*) FROM moved GROUP BY 1, 2
      ON CONFLICT (name, label) DO UPDATE SET n = fleet_counters.n + EXCLUDED.n;
    WITH moved AS (DELETE FROM fleet_queue_wait_log RETURNING waited),
         bucketed AS (SELECT (SELECT min(b.le) FROM fleet_queue_waits b WHERE b.le >= m.waited) AS le, m.waited FROM moved m)
    UPDATE fleet_queue_waits w SET n = w.n + s.n, sum_seconds = w.sum_seconds + s.total
      FROM (SELECT le, count(*) AS n, sum(waited) AS total FROM bucketed GROUP BY le) s WHERE w.le = s.le;
    RETURN true;
  END $$;
  CREATE INDEX IF NOT EXISTS idx_fleet_jobs_claimable ON fleet_jobs(priority DESC, id) WHERE state IN ('waiting', 'retrying');`

/**
 * Moves the logs into the totals (see above); false when another roll-up was under way (it
 * moves them), or the schema is older than the logs (its events went to the totals).
 */
export async function rollUpTallies(client: Pool | PoolClient): Promise<boolean> {
  try {
    return (await client.query<{ done: boolean }>('SELECT fleet_tallies_roll_up() AS done')).rows[0]?.done === true
  } catch (err) {
    // 42883: no such function (a schema older than the logs).
    if ((err as { code?: string }).code === '42883') return false
    throw err
  }
}
