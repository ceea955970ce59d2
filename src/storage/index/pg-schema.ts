import type { PoolClient } from 'pg'
import { pgCountersMigration, pgDeliveriesMigration, pgEnvMigration, pgSummaryTokensMigration, pgToolCallsMigration, pgTotalsMigration } from './pg-totals.js'
import { PG_CLAIM_HEAD_FUNCTION, PG_CLAIM_PROMPT_MIGRATION, PG_SPEND_MIGRATION, PG_SPENT_CAP_FUNCTION } from './spend.js'
import { PG_QUEUE_WAITS_MIGRATION } from './queue-waits.js'
import { PG_FLEET_COUNTERS_MIGRATION } from './fleet-counters.js'
import { PG_FLEET_TALLIES_MIGRATION, ROLL_UP_LOCK } from './fleet-tallies.js'
import { PG_PULL_REQUESTS_MIGRATION } from './pull-requests.js'
import { CLAIM_PER_USER_LOCK, PG_FLEET_CLAIM_MIGRATION } from './fleet-claim.js'
import { liveWorkerSql } from './worker-liveness.js'

/**
 * The fleet's tables in PostgreSQL (docs/contract.md §14.1), as numbered migrations: `tasks` has
 * the columns of tasks.db (task-index.ts), times kept as the same ISO text so that both
 * indexes answer alike; `fleet_jobs` and `fleet_workers` are the queue and its workers.
 * Migrations only add: none drops or rewrites what an older ctxagent wrote.
 */
const MIGRATIONS: readonly string[] = [
  `CREATE TABLE IF NOT EXISTS tasks (
     uuid TEXT PRIMARY KEY,
     status TEXT NOT NULL,
     location TEXT NOT NULL DEFAULT 'running',
     task_type TEXT NOT NULL,
     task_identifier TEXT,
     repository TEXT,
     "user" TEXT,
     hostname TEXT,
     created_at TEXT NOT NULL,
     started_at TEXT,
     updated_at TEXT,
     completed_at TEXT,
     metadata TEXT,
     total_messages BIGINT DEFAULT 0,
     total_summaries BIGINT DEFAULT 0,
     total_tool_calls BIGINT DEFAULT 0,
     llm_call_count BIGINT DEFAULT 0,
     total_tokens BIGINT DEFAULT 0,
     compression_count BIGINT DEFAULT 0,
     final_token_count BIGINT,
     final_message_count BIGINT,
     error_message TEXT,
     disk_bytes BIGINT,
     disk_bytes_raw BIGINT
   );
   CREATE INDEX IF NOT EXISTS idx_tasks_status ON tasks(status);
   CREATE INDEX IF NOT EXISTS idx_tasks_task_type ON tasks(task_type);
   CREATE INDEX IF NOT EXISTS idx_tasks_repository ON tasks(repository);
   CREATE INDEX IF NOT EXISTS idx_tasks_user ON tasks("user");
   CREATE INDEX IF NOT EXISTS idx_tasks_completed_at ON tasks(completed_at);
   CREATE INDEX IF NOT EXISTS idx_tasks_location ON tasks(location);
   CREATE INDEX IF NOT EXISTS idx_tasks_created_at ON tasks(created_at);`,
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
  // `poll`'s memory: which task each polled issue became, and which of its labels it set last.
  `CREATE TABLE IF NOT EXISTS fleet_polled (
     source TEXT NOT NULL,
     ref TEXT NOT NULL,
     task_uuid TEXT NOT NULL,
     label TEXT,
     created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
     updated_at TIMESTAMPTZ NOT NULL DEFAULT now(),
     PRIMARY KEY (source, ref)
   );`,
  // The trigger label that made the item's current job: pollers with different labels over
  // one repository each cancel and run again only their own (NULL: a row from before, taken
  // over by the first poller that lists its item).
  `ALTER TABLE fleet_polled ADD COLUMN IF NOT EXISTS trigger TEXT;`,
  // The token split, so that stats sums columns instead of reading every task's state.json.
  `ALTER TABLE tasks ADD COLUMN IF NOT EXISTS prompt_tokens BIGINT;
   ALTER TABLE tasks ADD COLUMN IF NOT EXISTS completion_tokens BIGINT;
   ALTER TABLE tasks ADD COLUMN IF NOT EXISTS cached_tokens BIGINT;`,
  // Jobs an operator can run (docs/contract.md §14.4): retrying (claimable again once next_run_at is
  // due), failed and cancelled; whose job it is (per-user limits); an idempotency key that
  // holds while the job is open; a cancel asked of a running job. A retrying job is open:
  // the one-open-job-per-task index is made again to count it (the old one dropped after).
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
  // Fleet-wide passes (watch-locks, cleanup) hold a lease row with an expiry, not a session
  // lock, which a pooler in transaction mode would leave on a pooled connection (docs/contract.md §14.5).
  // denied_since/denied_interval: since when passes have been refused it, and how often they come.
  `CREATE TABLE IF NOT EXISTS fleet_leases (
     name TEXT PRIMARY KEY,
     holder TEXT NOT NULL,
     taken_at TIMESTAMPTZ NOT NULL DEFAULT now(),
     expires_at TIMESTAMPTZ NOT NULL,
     done_at TIMESTAMPTZ,
     denied_since TIMESTAMPTZ,
     denied_interval DOUBLE PRECISION
   );`,
  // One wake-up per job (docs/contract.md §14.5): an idle worker (its last claim found nothing) has a row
  // naming its own LISTEN channel; a job that starts waiting takes the longest-idle live
  // worker's row and NOTIFYs that channel alone, or 'ctxagent_jobs' (every worker) when no
  // worker is idle. A wake that reaches a worker with no free slot is passed on (fleet_wake_idle).
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
      WHERE ${liveWorkerSql('w', 'i.stale_seconds')}
      ORDER BY i.since LIMIT 1 FOR UPDATE OF i SKIP LOCKED;
     IF chosen IS NOT NULL THEN DELETE FROM fleet_idle WHERE channel = chosen; END IF;
     PERFORM pg_notify(COALESCE(chosen, 'ctxagent_jobs'), '');
   END $$;
   CREATE OR REPLACE FUNCTION fleet_jobs_notify() RETURNS trigger LANGUAGE plpgsql AS $$
   BEGIN
     PERFORM fleet_wake_idle();
     RETURN NULL;
   END $$;`,
  // Running totals kept by a trigger (totals.ts, pg-totals.ts), and the task list's indexes.
  pgTotalsMigration(),
  // The list's text filter's line (task-list.ts); NULL in rows written before, until a reindex.
  `ALTER TABLE tasks ADD COLUMN IF NOT EXISTS search TEXT;`,
  // Tool calls by tool and outcome: a JSON column per row, summed into task_tool_calls by a trigger (pg-totals.ts).
  pgToolCallsMigration(),
  // The review loop (docs/delivery.md#the-review-loop): per own pull/merge request, the
  // follow-ups queued (at most deliver.max_rounds), the events already answered, the latest follow-up's task.
  `CREATE TABLE IF NOT EXISTS fleet_reviews (
     source TEXT NOT NULL,
     ref TEXT NOT NULL,
     rounds INTEGER NOT NULL DEFAULT 0,
     seen TEXT[] NOT NULL DEFAULT '{}',
     task_uuid TEXT,
     created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
     updated_at TIMESTAMPTZ NOT NULL DEFAULT now(),
     PRIMARY KEY (source, ref)
   );`,
  // Spend per user per day and usage limits per API key, for the budgets (spend.ts): kept by cleanup and reindex.
  PG_SPEND_MIGRATION,
  // A job's history and its waits (docs/fleet-operations.md#a-jobs-history): one row per attempt (when, where, how it
  // ended, why, what it waits for), deleted with its job by cleanup (no foreign key: an operator's TRUNCATE of fleet_jobs must not fail). A job waiting out a usage limit or a spent budget is `retrying`
  // with wait_reason (rate-limit, budget) until next_run_at; limit_waits counts the claims that ended so (they spend no
  // fleet.retry attempt), waited_seconds the waits so far (fleet.retry.max_wait_hours). A key is kept after its job ended
  // done for fleet.key_retention_hours: the look-up by key and finish time is indexed.
  `ALTER TABLE fleet_jobs ADD COLUMN IF NOT EXISTS wait_reason TEXT;
   ALTER TABLE fleet_jobs ADD COLUMN IF NOT EXISTS wait_cap TEXT;
   ALTER TABLE fleet_jobs ADD COLUMN IF NOT EXISTS limit_waits INTEGER NOT NULL DEFAULT 0;
   ALTER TABLE fleet_jobs ADD COLUMN IF NOT EXISTS waited_seconds DOUBLE PRECISION NOT NULL DEFAULT 0;
   CREATE INDEX IF NOT EXISTS idx_fleet_jobs_key_done ON fleet_jobs(idempotency_key, finished_at) WHERE idempotency_key IS NOT NULL AND state = 'done';
   CREATE TABLE IF NOT EXISTS fleet_job_attempts (
     id BIGSERIAL PRIMARY KEY,
     job_id BIGINT NOT NULL,
     attempt INTEGER NOT NULL,
     worker_id TEXT,
     hostname TEXT,
     started_at TIMESTAMPTZ,
     ended_at TIMESTAMPTZ NOT NULL DEFAULT now(),
     outcome TEXT NOT NULL,
     reason TEXT NOT NULL,
     cap TEXT,
     error TEXT,
     wait_until TIMESTAMPTZ,
     again BOOLEAN NOT NULL DEFAULT false
   );
   CREATE INDEX IF NOT EXISTS idx_fleet_job_attempts_job ON fleet_job_attempts(job_id);`,
  // Cache writes and the requests that were not turns (summaries, final summaries), as columns and counters (totals.ts).
  pgCountersMigration(),
  // The queue wait histogram's running totals, and when each job became claimable (queue-waits.ts).
  PG_QUEUE_WAITS_MIGRATION,
  // The fleet's counters (claims, finished jobs, retries, budget pauses): running totals kept by triggers, which cleanup leaves (fleet-counters.ts).
  PG_FLEET_COUNTERS_MIGRATION,
  // The histogram's and the counters' events appended to logs that readers roll up, off the claim's path; the claim's index (fleet-tallies.ts);
  // its look at the queue's head and its spend read, planned once per connection (spend.ts).
  PG_FLEET_TALLIES_MIGRATION + PG_SPENT_CAP_FUNCTION + PG_CLAIM_HEAD_FUNCTION,
  // Deliveries by result, as a column and counters (totals.ts; ctxagent_deliveries_total).
  pgDeliveriesMigration(),
  // The pull/merge requests ctxagent opened: the tasks' link to them, and the forge's facts (pull-requests.ts).
  PG_PULL_REQUESTS_MIGRATION,
  // The repositories' environments: each row's cache result and setup time, as columns and counters (env-totals.ts).
  pgEnvMigration(),
  // The summaries' tokens, as columns and counters, so that /metrics' cost is the task's bill (totals.ts).
  pgSummaryTokensMigration(),
  // The spend read counts a resume's window as run's check at start does (spend.ts): one estimate of a first request.
  PG_CLAIM_PROMPT_MIGRATION,
  // The claim (which calls that spend read) and a job's plain end as functions (one round trip each, their plans kept
  // per connection), and the index of budget waits (fleet-claim.ts).
  PG_FLEET_CLAIM_MIGRATION,
]

/** Advisory lock keys (bigint constants: hashtext() is not a stable API); transaction-scoped only (docs/contract.md §14.5). */
export const LOCK_KEYS = { migrate: 0x637478_01, claimPerUser: CLAIM_PER_USER_LOCK, carrySpend: 0x637478_06, rollUp: ROLL_UP_LOCK } as const

/**
 * Brings the schema up to date: under a transaction-scoped advisory lock, so that many
 * hosts starting at once migrate once and the others wait, then find nothing to do.
 * A database migrated by a newer ctxagent is used as it is (migrations only add).
 */
export async function migrate(client: PoolClient): Promise<void> {
  // Up to date, as it is for nearly every command of a fleet (each enqueue checks): one read,
  // no transaction and no lock, which many commands at once would otherwise queue on.
  if ((await versionNow(client)) >= MIGRATIONS.length) return
  await client.query('BEGIN')
  try {
    await client.query('SELECT pg_advisory_xact_lock($1)', [LOCK_KEYS.migrate])
    await client.query('CREATE TABLE IF NOT EXISTS ctxagent_schema (version INTEGER NOT NULL)')
    const row = (await client.query<{ version: number }>('SELECT version FROM ctxagent_schema')).rows[0]
    if (row === undefined) await client.query('INSERT INTO ctxagent_schema (version) VALUES (0)')
    const current = row?.version ?? 0
    for (let i = current; i < MIGRATIONS.length; i++) await client.query(MIGRATIONS[i] as string)
    if (current < MIGRATIONS.length) await client.query('UPDATE ctxagent_schema SET version = $1', [MIGRATIONS.length])
    await client.query('COMMIT')
  } catch (err) {
    await client.query('ROLLBACK').catch(() => undefined)
    throw err
  }
}

/** The schema's version (0 before the first migration). */
async function versionNow(client: PoolClient): Promise<number> {
  try {
    return Number((await client.query<{ version: number | null }>('SELECT max(version) AS version FROM ctxagent_schema')).rows[0]?.version ?? 0)
  } catch (err) {
    if ((err as { code?: string }).code === '42P01') return 0
    throw err
  }
}

export const SCHEMA_VERSION = MIGRATIONS.length

/** The schema's version just before `migration` ran: what a database an older ctxagent left says (for tests that rebuild one). */
export function versionBefore(migration: string): number {
  const at = MIGRATIONS.indexOf(migration)
  if (at < 0) throw new Error('versionBefore: not one of the migrations')
  return at
}
