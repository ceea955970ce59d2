// The claim as it was at commit c884e40 (before the queue wait histogram, the fleet's counters
// and the claim's budget read), kept as it was so that bench/fleet-claims.mjs measures the claim
// of today against it in the same run, on the same server: its tables in a schema of their
// own (`bench_c884e40`), made by that commit's migrations of the fleet's queue, its claim
// statement (JobQueue.claim) and its finish (JobQueue.finish of a completed job: endJob's
// done path). Nothing here follows the code of today: that is the point.

export const SCHEMA = 'bench_c884e40'

/** c884e40's src/storage/index/pg-schema.ts: the migrations that made fleet_jobs, fleet_workers and fleet_idle. */
const MIGRATIONS = [
  `CREATE TABLE IF NOT EXISTS fleet_jobs (
     id BIGSERIAL PRIMARY KEY,
     task_uuid TEXT NOT NULL,
     kind TEXT NOT NULL,
     spec JSONB NOT NULL,
     state TEXT NOT NULL DEFAULT 'waiting',
     priority INTEGER NOT NULL DEFAULT 0,
     attempts INTEGER NOT NULL DEFAULT 0,
     dedupe_key TEXT,
     claimed_by TEXT,
     claimed_at TIMESTAMPTZ,
     created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
     finished_at TIMESTAMPTZ,
     outcome TEXT,
     error TEXT
   );
   CREATE INDEX IF NOT EXISTS idx_fleet_jobs_waiting ON fleet_jobs(priority DESC, id) WHERE state = 'waiting';
   CREATE INDEX IF NOT EXISTS idx_fleet_jobs_task ON fleet_jobs(task_uuid);
   CREATE UNIQUE INDEX IF NOT EXISTS idx_fleet_jobs_dedupe ON fleet_jobs(dedupe_key) WHERE dedupe_key IS NOT NULL;
   CREATE UNIQUE INDEX IF NOT EXISTS idx_fleet_jobs_one_open ON fleet_jobs(task_uuid) WHERE state IN ('waiting', 'running');
   CREATE TABLE IF NOT EXISTS fleet_workers (
     id TEXT PRIMARY KEY,
     hostname TEXT NOT NULL,
     host_id TEXT NOT NULL,
     pid INTEGER NOT NULL,
     concurrency INTEGER NOT NULL,
     started_at TIMESTAMPTZ NOT NULL DEFAULT now(),
     heartbeat_at TIMESTAMPTZ NOT NULL DEFAULT now(),
     stopped_at TIMESTAMPTZ
   );
   CREATE OR REPLACE FUNCTION fleet_jobs_notify() RETURNS trigger LANGUAGE plpgsql AS $$
   BEGIN
     PERFORM pg_notify('ctxagent_jobs', '');
     RETURN NULL;
   END $$;
   DROP TRIGGER IF EXISTS fleet_jobs_waiting ON fleet_jobs;
   CREATE TRIGGER fleet_jobs_waiting AFTER INSERT OR UPDATE OF state ON fleet_jobs
     FOR EACH ROW WHEN (NEW.state = 'waiting') EXECUTE FUNCTION fleet_jobs_notify();`,
  `ALTER TABLE fleet_jobs ADD COLUMN IF NOT EXISTS next_run_at TIMESTAMPTZ;
   ALTER TABLE fleet_jobs ADD COLUMN IF NOT EXISTS "user" TEXT;
   ALTER TABLE fleet_jobs ADD COLUMN IF NOT EXISTS idempotency_key TEXT;
   ALTER TABLE fleet_jobs ADD COLUMN IF NOT EXISTS cancel_requested_at TIMESTAMPTZ;
   CREATE UNIQUE INDEX IF NOT EXISTS idx_fleet_jobs_open_task ON fleet_jobs(task_uuid) WHERE state IN ('waiting', 'running', 'retrying');
   DROP INDEX IF EXISTS idx_fleet_jobs_one_open;
   CREATE UNIQUE INDEX IF NOT EXISTS idx_fleet_jobs_open_key ON fleet_jobs(idempotency_key) WHERE idempotency_key IS NOT NULL AND state IN ('waiting', 'running', 'retrying');
   CREATE INDEX IF NOT EXISTS idx_fleet_jobs_retrying ON fleet_jobs(next_run_at) WHERE state = 'retrying';
   CREATE INDEX IF NOT EXISTS idx_fleet_jobs_running_user ON fleet_jobs("user") WHERE state = 'running';
   CREATE INDEX IF NOT EXISTS idx_fleet_jobs_finished ON fleet_jobs(finished_at) WHERE finished_at IS NOT NULL;`,
  `CREATE TABLE IF NOT EXISTS fleet_idle (
     channel TEXT PRIMARY KEY,
     worker_id TEXT NOT NULL,
     stale_seconds DOUBLE PRECISION NOT NULL,
     since TIMESTAMPTZ NOT NULL DEFAULT now()
   );
   CREATE INDEX IF NOT EXISTS idx_fleet_idle_since ON fleet_idle(since);
   CREATE OR REPLACE FUNCTION fleet_wake_idle() RETURNS void LANGUAGE plpgsql AS $$
   DECLARE chosen TEXT;
   BEGIN
     SELECT i.channel INTO chosen FROM fleet_idle i JOIN fleet_workers w ON w.id = i.worker_id
      WHERE w.stopped_at IS NULL AND w.heartbeat_at > now() - make_interval(secs => i.stale_seconds)
      ORDER BY i.since LIMIT 1 FOR UPDATE OF i SKIP LOCKED;
     IF chosen IS NOT NULL THEN DELETE FROM fleet_idle WHERE channel = chosen; END IF;
     PERFORM pg_notify(COALESCE(chosen, 'ctxagent_jobs'), '');
   END $$;
   CREATE OR REPLACE FUNCTION fleet_jobs_notify() RETURNS trigger LANGUAGE plpgsql AS $$
   BEGIN
     PERFORM fleet_wake_idle();
     RETURN NULL;
   END $$;`,
]

/** Makes the schema and its tables (once per server); a pool then uses them with `search_path` (POOL_OPTIONS). */
export async function createSchema(client) {
  await client.query(`CREATE SCHEMA IF NOT EXISTS ${SCHEMA}`)
  await client.query(`SET search_path TO ${SCHEMA}`)
  for (const m of MIGRATIONS) await client.query(m)
  await client.query('RESET search_path')
}

/** A pg.Pool's `options` that make its connections use the baseline's tables. */
export const POOL_OPTIONS = `-c search_path=${SCHEMA}`

const JOB_COLUMNS = 'j.id, j.task_uuid, j.kind, j.spec, j.state, j.priority, j.attempts, j.claimed_by, j."user"'

/** c884e40's JobQueue.claim without a per-user limit (one statement), with the worker's idle channel. */
const CLAIM = `WITH claimed AS (
         UPDATE fleet_jobs j SET state = 'running', claimed_by = $1, claimed_at = now(), attempts = j.attempts + 1, next_run_at = NULL
         WHERE j.id = (
           SELECT c.id FROM fleet_jobs c
           WHERE (c.state = 'waiting' OR (c.state = 'retrying' AND c.next_run_at <= now()))
             AND ($2::int IS NULL OR c."user" IS NULL
                  OR (SELECT count(*) FROM fleet_jobs r WHERE r.state = 'running' AND r."user" = c."user") < $2::int)
           ORDER BY c.priority DESC, c.id FOR UPDATE SKIP LOCKED LIMIT 1)
         RETURNING ${JOB_COLUMNS}),
       busy AS (DELETE FROM fleet_idle WHERE $3::text IS NOT NULL AND channel = $3 AND EXISTS (SELECT 1 FROM claimed)),
       idle AS (INSERT INTO fleet_idle (channel, worker_id, stale_seconds) SELECT $3, $1, $4 WHERE $3::text IS NOT NULL AND NOT EXISTS (SELECT 1 FROM claimed)
                ON CONFLICT (channel) DO NOTHING)
       SELECT * FROM claimed j`

/**
 * c884e40's queue on a pg.Pool whose search_path is the schema (POOL_OPTIONS): claim, and finish
 * of a completed job (its transaction: the row read FOR UPDATE, then ended done).
 */
export function baselineQueue(pool) {
  return {
    async claim(workerId, perUser, idle) {
      const rows = (await pool.query(CLAIM, [workerId, perUser, idle?.channel ?? null, idle?.staleSeconds ?? 0])).rows
      return rows[0] === undefined ? null : { id: Number(rows[0].id), attempts: Number(rows[0].attempts) }
    },
    async finish(job, workerId) {
      const client = await pool.connect()
      try {
        await finishIn(client, job, workerId)
      } finally {
        client.release()
      }
    },
  }
}

/** c884e40's endJob of a completed job, in its transaction (JobQueue.finish). */
async function finishIn(client, job, workerId) {
  await client.query('BEGIN')
  try {
    const found = await client.query(
      `SELECT ${JOB_COLUMNS}, j.cancel_requested_at FROM fleet_jobs j WHERE j.id = $1 AND j.state = 'running' AND ($2::text IS NULL OR (j.claimed_by = $2 AND j.attempts = $3)) FOR UPDATE`,
      [job.id, workerId, job.attempts],
    )
    if (found.rows[0] !== undefined)
      await client.query(`UPDATE fleet_jobs SET state = $2, finished_at = now(), outcome = $3, error = $4 WHERE id = $1`, [job.id, 'done', 'completed', null])
    await client.query('COMMIT')
  } catch (err) {
    await client.query('ROLLBACK').catch(() => undefined)
    throw err
  }
}
