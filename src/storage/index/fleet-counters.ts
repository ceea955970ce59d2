import type { Pool } from 'pg'

/**
 * The fleet's counters on /metrics (docs/serve.md#fleet-counters): running totals in
 * `fleet_counters` (one row per counter and label) and the log since its last roll-up
 * (fleet-tallies.ts), added to by triggers as each event happens, so that every path
 * that claims, ends or retries a job counts without a word in its SQL. Only a roll-up
 * deletes from the log, moving it into the rows in the same transaction: cleanup expiring
 * jobs and their history leaves the counts as they are, and they never fall.
 *
 * - `claims` (label: the claiming worker's host): a job became `running` under a worker.
 * - `finished` (label: the job's outcome): a job became `done`, `failed` or `cancelled`.
 * - `retries` (label: the attempt's reason): an attempt after which the job ran again.
 * - `budget_pauses` (label: the cap): an attempt that ended paused by a budget.
 */
export const FLEET_COUNTERS = ['claims', 'finished', 'retries', 'budget_pauses'] as const
export type FleetCounter = (typeof FLEET_COUNTERS)[number]

/** A counter's totals by label. */
export type FleetCounts = Record<FleetCounter, Record<string, number>>

const ENDED = `('done', 'failed', 'cancelled')`

/**
 * The counts the rows say today: the migration's starting values (so that an upgrade neither
 * drops a counter nor makes it jump), and /metrics' on a schema older than the table.
 */
export const COUNTS_FROM_ROWS = `
  SELECT 'claims' AS name, COALESCE(w.hostname, 'unknown') AS label, count(*) AS n
    FROM fleet_jobs j LEFT JOIN fleet_workers w ON w.id = j.claimed_by WHERE j.claimed_by IS NOT NULL GROUP BY 2
  UNION ALL SELECT 'finished', COALESCE(outcome, 'unknown'), count(*) FROM fleet_jobs WHERE state IN ${ENDED} GROUP BY 2
  UNION ALL SELECT 'retries', reason, count(*) FROM fleet_job_attempts WHERE again GROUP BY 2
  UNION ALL SELECT 'budget_pauses', COALESCE(cap, 'unknown'), count(*) FROM fleet_job_attempts WHERE reason = 'budget' GROUP BY 2`

/**
 * The migration: the table, its triggers, then its first values from the rows as they are.
 * Both tables are locked first, so that no write lands between the triggers and the first
 * values: none is counted twice or lost. The jobs first, in a mode that waits for every
 * transaction holding one of their rows (EXCLUSIVE: even one read FOR UPDATE; plain reads
 * go on): each of the fleet's transactions that writes a job's history has locked the job
 * before, and now either ends before the migration locks the history, or waits for it
 * from its start. (The history first, or the jobs in a weaker mode, and a transaction that
 * wrote its job before its history, as a hand-back's last attempt does, deadlocked with it.)
 */
export const PG_FLEET_COUNTERS_MIGRATION = `
  LOCK TABLE fleet_jobs IN EXCLUSIVE MODE;
  LOCK TABLE fleet_job_attempts IN SHARE ROW EXCLUSIVE MODE;
  CREATE TABLE IF NOT EXISTS fleet_counters (name TEXT NOT NULL, label TEXT NOT NULL, n BIGINT NOT NULL DEFAULT 0, PRIMARY KEY (name, label));
  CREATE OR REPLACE FUNCTION fleet_counters_add(TEXT, TEXT) RETURNS void LANGUAGE sql AS $$
    INSERT INTO fleet_counters (name, label, n) VALUES ($1, $2, 1) ON CONFLICT (name, label) DO UPDATE SET n = fleet_counters.n + 1
  $$;
  CREATE OR REPLACE FUNCTION fleet_jobs_count() RETURNS trigger LANGUAGE plpgsql AS $$
  BEGIN
    IF NEW.state = 'running' AND NEW.claimed_by IS NOT NULL
       AND (TG_OP = 'INSERT' OR OLD.state IS DISTINCT FROM 'running' OR OLD.claimed_by IS DISTINCT FROM NEW.claimed_by) THEN
      PERFORM fleet_counters_add('claims', COALESCE((SELECT w.hostname FROM fleet_workers w WHERE w.id = NEW.claimed_by), 'unknown'));
    END IF;
    IF NEW.state IN ${ENDED} AND (TG_OP = 'INSERT' OR OLD.state NOT IN ${ENDED}) THEN
      PERFORM fleet_counters_add('finished', COALESCE(NEW.outcome, 'unknown'));
    END IF;
    RETURN NULL;
  END $$;
  DROP TRIGGER IF EXISTS fleet_jobs_count ON fleet_jobs;
  CREATE TRIGGER fleet_jobs_count AFTER INSERT OR UPDATE OF state, claimed_by ON fleet_jobs FOR EACH ROW EXECUTE FUNCTION fleet_jobs_count();
  CREATE OR REPLACE FUNCTION fleet_job_attempts_count() RETURNS trigger LANGUAGE plpgsql AS $$
  BEGIN
    IF NEW.again THEN PERFORM fleet_counters_add('retries', NEW.reason); END IF;
    IF NEW.reason = 'budget' THEN PERFORM fleet_counters_add('budget_pauses', COALESCE(NEW.cap, 'unknown')); END IF;
    RETURN NULL;
  END $$;
  DROP TRIGGER IF EXISTS fleet_job_attempts_count ON fleet_job_attempts;
  CREATE TRIGGER fleet_job_attempts_count AFTER INSERT ON fleet_job_attempts FOR EACH ROW EXECUTE FUNCTION fleet_job_attempts_count();
  INSERT INTO fleet_counters (name, label, n) ${COUNTS_FROM_ROWS} ON CONFLICT (name, label) DO NOTHING;`

/** Rows of (name, label, n) as counts by counter and label. */
export function countsOf(rows: { name: string; label: string; n: string | number }[]): FleetCounts {
  const out = Object.fromEntries(FLEET_COUNTERS.map((c) => [c, {}])) as FleetCounts
  for (const r of rows) if (r.name in out) out[r.name as FleetCounter][r.label] = Number(r.n)
  return out
}

/**
 * The counters' totals: the rolled-up rows and the log since (fleet-tallies.ts), in one
 * statement; null when the schema is older than the counters (the caller counts from the
 * rows, as before).
 */
export async function fleetCounterTotals(pool: Pool): Promise<FleetCounts | null> {
  const withLog = `SELECT name, label, sum(n) AS n FROM (
      SELECT name, label, n FROM fleet_counters UNION ALL SELECT name, label, count(*) FROM fleet_counter_log GROUP BY 1, 2) t GROUP BY 1, 2`
  for (const sql of [withLog, 'SELECT name, label, n FROM fleet_counters']) {
    try {
      return countsOf((await pool.query<{ name: string; label: string; n: string }>(sql)).rows)
    } catch (err) {
      // 42P01: a table older schemas lack (the log, then the counters).
      if ((err as { code?: string }).code !== '42P01') throw err
    }
  }
  return null
}

/** The counts from the jobs and attempts still kept (a schema older than the counters: they fall when cleanup expires rows). */
export async function countsFromRows(pool: Pool): Promise<FleetCounts> {
  return countsOf((await pool.query<{ name: string; label: string; n: string }>(COUNTS_FROM_ROWS)).rows)
}
