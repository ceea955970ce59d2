import type { Database as Db, Statement } from 'better-sqlite3'

/**
 * What the budgets need of the index (docs/running.md#budgets), in tasks.db and in
 * PostgreSQL alike:
 *
 * - `user_spend`: USD spent per user per day (the day in budgets.timezone, `YYYY-MM-DD`),
 *   added to by each agent after each LLM request it paid for. Not derived from `tasks`:
 *   a task's cost spans days, and prices are config. So cleanup (which deletes task rows)
 *   and reindex (which rebuilds them) leave it as it is, as they leave the counters;
 *   reindex into PostgreSQL adds tasks.db's to it, once (spend-carry.ts).
 * - `llm_key_limits`: a provider's usage limit on one API key, until when: keyed by the
 *   SHA-256 of base URL and key (never the key), so that every task on that key waits
 *   without a failed request of its own.
 */

export interface SpendRow {
  user: string
  day: string
  usd: number
  requests: number
}

/** A user's spend today and this month, and everyone's today. */
export interface SpendTotals {
  user_day: number
  user_month: number
  fleet_day: number
}

export const SQLITE_SPEND_MIGRATION = `CREATE TABLE user_spend (
     user TEXT NOT NULL,
     day TEXT NOT NULL,
     usd REAL NOT NULL DEFAULT 0,
     requests INTEGER NOT NULL DEFAULT 0,
     PRIMARY KEY (user, day)
   );
   CREATE INDEX idx_user_spend_day ON user_spend(day);
   CREATE TABLE llm_key_limits (
     key TEXT PRIMARY KEY,
     provider TEXT NOT NULL,
     until TEXT NOT NULL,
     recorded_at TEXT NOT NULL
   );`

export const PG_SPEND_MIGRATION = `CREATE TABLE IF NOT EXISTS user_spend (
     "user" TEXT NOT NULL,
     day TEXT NOT NULL,
     usd DOUBLE PRECISION NOT NULL DEFAULT 0,
     requests BIGINT NOT NULL DEFAULT 0,
     PRIMARY KEY ("user", day)
   );
   CREATE INDEX IF NOT EXISTS idx_user_spend_day ON user_spend(day);
   CREATE TABLE IF NOT EXISTS llm_key_limits (
     key TEXT PRIMARY KEY,
     provider TEXT NOT NULL,
     until TIMESTAMPTZ NOT NULL,
     recorded_at TIMESTAMPTZ NOT NULL DEFAULT now()
   );`

/**
 * The claim's spend read (src/fleet/queue/claim-budget.ts says what it decides; fleet-claim.ts's fleet_claim calls it): the cap that user
 * `u`'s spend has passed by the claim's figures `b` (a ClaimBudget as jsonb; NULL: none), or
 * NULL: the month's first (its reset is the latest), then the day's, then the fleet's, whose
 * spend today (`fleet`) the claim reads once. The user's month and day are one read of
 * user_spend's key. A function, so that each connection plans its query once, not each claim.
 */
export const PG_SPENT_CAP_FUNCTION = `
  CREATE OR REPLACE FUNCTION fleet_spent_cap(u TEXT, b JSONB, fleet DOUBLE PRECISION) RETURNS TEXT LANGUAGE plpgsql STABLE AS $$
  DECLARE
    caps JSONB := COALESCE(b->'users'->u, b->'all');
    month DOUBLE PRECISION;
    today DOUBLE PRECISION;
  BEGIN
    IF b IS NULL THEN RETURN NULL; END IF;
    IF u IS NOT NULL THEN
      SELECT coalesce(sum(s.usd), 0), coalesce(sum(s.usd) FILTER (WHERE s.day = b->>'day'), 0) INTO month, today
        FROM user_spend s WHERE s."user" = u AND s.day BETWEEN b->>'from' AND b->>'to';
      IF (caps->>'monthly')::float8 < month THEN RETURN 'user-monthly'; END IF;
      IF (caps->>'daily')::float8 < today THEN RETURN 'user-daily'; END IF;
    END IF;
    IF (caps->>'fleet')::float8 < fleet THEN RETURN 'fleet-daily'; END IF;
    RETURN NULL;
  END $$;`

/**
 * Kept as the migration that made it (schema 18); the claim no longer calls it: fleet_claim
 * (fleet-claim.ts) reads the spend of the user of each job it comes to, and makes all of a
 * held user's due jobs wait, not only those among the first `mark`.
 *
 * The claim's look at the head of the queue (src/fleet/claim-statement.ts): the first `mark`
 * jobs it may take (waiting, or retrying and due), in its order, each with its user (a job
 * without one: the worker's OS user), the cap that holds that user back ('' for none) and
 * until when (NULL: the cap's own reset, by the claim's figures). A user is held back by a
 * cap their spend has passed (read once per user: one grouped read of user_spend's key), or
 * by a job of theirs already waiting for a user-daily or user-monthly window, or, when the
 * fleet's cap applies to them, by any job waiting for fleet-daily: the claim then makes the
 * user's jobs wait for the same window, until the same time, so that each says why and
 * until when (docs/fleet-operations.md#waits). A function, so that each connection plans
 * it once, not each claim.
 */
export const PG_CLAIM_HEAD_FUNCTION = `
  CREATE OR REPLACE FUNCTION fleet_claim_head(b JSONB, mark INTEGER) RETURNS TABLE (id BIGINT, u TEXT, cap TEXT, until TIMESTAMPTZ) LANGUAGE plpgsql STABLE AS $$
  DECLARE
    fleet DOUBLE PRECISION;
  BEGIN
    SELECT coalesce(sum(s.usd), 0) INTO fleet FROM user_spend s WHERE s.day = b->>'day';
    RETURN QUERY
      WITH head AS MATERIALIZED (
        SELECT c.id, COALESCE(c."user", b->>'os_user') AS u, c.priority FROM fleet_jobs c
        WHERE c.state IN ('waiting', 'retrying') AND (c.state = 'waiting' OR c.next_run_at <= now())
        ORDER BY c.priority DESC, c.id LIMIT mark),
      spend AS (
        SELECT s."user", sum(s.usd) AS month, sum(s.usd) FILTER (WHERE s.day = b->>'day') AS today FROM user_spend s
        WHERE s."user" IN (SELECT head.u FROM head) AND s.day BETWEEN b->>'from' AND b->>'to' GROUP BY s."user"),
      waits AS (
        SELECT COALESCE(w."user", '') AS u, w.wait_cap AS cap, max(w.next_run_at) AS until FROM fleet_jobs w
        WHERE w.state = 'retrying' AND w.next_run_at > now() AND w.wait_reason = 'budget' AND w.wait_cap IN ('user-daily', 'user-monthly', 'fleet-daily')
        GROUP BY 1, 2),
      caps AS (
        SELECT h.u, COALESCE(b->'users'->h.u, b->'all') AS t, coalesce(m.month, 0) AS month, coalesce(m.today, 0) AS today
        FROM (SELECT DISTINCT head.u FROM head) h LEFT JOIN spend m ON m."user" = h.u),
      held AS (
        SELECT k.u,
               CASE WHEN (k.t->>'monthly')::float8 < k.month THEN 'user-monthly' WHEN (k.t->>'daily')::float8 < k.today THEN 'user-daily'
                    WHEN (k.t->>'fleet')::float8 < fleet THEN 'fleet-daily' END AS spent,
               (SELECT w.cap FROM waits w WHERE w.u = k.u AND w.cap <> 'fleet-daily' ORDER BY w.until DESC LIMIT 1) AS own,
               (SELECT w.until FROM waits w WHERE w.u = k.u AND w.cap <> 'fleet-daily' ORDER BY w.until DESC LIMIT 1) AS own_until,
               CASE WHEN k.t->>'fleet' IS NOT NULL THEN (SELECT max(w.until) FROM waits w WHERE w.cap = 'fleet-daily') END AS fleet_until
        FROM caps k)
      SELECT head.id, head.u,
             COALESCE(x.spent, x.own, CASE WHEN x.fleet_until IS NOT NULL THEN 'fleet-daily' END, ''),
             CASE WHEN x.spent IS NOT NULL THEN NULL WHEN x.own IS NOT NULL THEN x.own_until ELSE x.fleet_until END
      FROM head JOIN held x ON x.u = head.u ORDER BY head.priority DESC, head.id;
  END $$;`

/**
 * The claim's figures with a resume's context (docs/fleet-operations.md#waits): a resume job's first request sends its
 * task's window as it paused (the index's final_token_count, state.json's current_context_tokens), so the claim
 * counts it at the user's prompt rate (the ClaimBudget's `prompt`), as `run`'s check at start does
 * (run/budget-start.ts firstPromptTokens): a resume whose window the cap cannot cover is held with its reason, never
 * claimed only to be refused. A new job's statement is not read here (its prompt is `run`'s to count).
 *
 * `need`: the USD of that prompt, subtracted from each threshold. The head's look now decides per job, a user's
 * other jobs still held by the waits as before.
 */
export const PG_CLAIM_PROMPT_MIGRATION = `
  CREATE OR REPLACE FUNCTION fleet_spent_cap(u TEXT, b JSONB, fleet DOUBLE PRECISION, need DOUBLE PRECISION) RETURNS TEXT LANGUAGE plpgsql STABLE AS $$
  DECLARE
    caps JSONB := COALESCE(b->'users'->u, b->'all');
    month DOUBLE PRECISION;
    today DOUBLE PRECISION;
  BEGIN
    IF b IS NULL THEN RETURN NULL; END IF;
    IF u IS NOT NULL THEN
      SELECT coalesce(sum(s.usd), 0), coalesce(sum(s.usd) FILTER (WHERE s.day = b->>'day'), 0) INTO month, today
        FROM user_spend s WHERE s."user" = u AND s.day BETWEEN b->>'from' AND b->>'to';
      IF (caps->>'monthly')::float8 - need < month THEN RETURN 'user-monthly'; END IF;
      IF (caps->>'daily')::float8 - need < today THEN RETURN 'user-daily'; END IF;
    END IF;
    IF (caps->>'fleet')::float8 - need < fleet THEN RETURN 'fleet-daily'; END IF;
    RETURN NULL;
  END $$;
  CREATE OR REPLACE FUNCTION fleet_claim_head(b JSONB, mark INTEGER) RETURNS TABLE (id BIGINT, u TEXT, cap TEXT, until TIMESTAMPTZ) LANGUAGE plpgsql STABLE AS $$
  DECLARE
    fleet DOUBLE PRECISION;
  BEGIN
    SELECT coalesce(sum(s.usd), 0) INTO fleet FROM user_spend s WHERE s.day = b->>'day';
    RETURN QUERY
      WITH head AS MATERIALIZED (
        SELECT c.id, COALESCE(c."user", b->>'os_user') AS u, c.priority,
               ${claimNeedSql('c', 'b')} AS need
        FROM fleet_jobs c
        WHERE c.state IN ('waiting', 'retrying') AND (c.state = 'waiting' OR c.next_run_at <= now())
        ORDER BY c.priority DESC, c.id LIMIT mark),
      spend AS (
        SELECT s."user", sum(s.usd) AS month, sum(s.usd) FILTER (WHERE s.day = b->>'day') AS today FROM user_spend s
        WHERE s."user" IN (SELECT head.u FROM head) AND s.day BETWEEN b->>'from' AND b->>'to' GROUP BY s."user"),
      waits AS (
        SELECT COALESCE(w."user", '') AS u, w.wait_cap AS cap, max(w.next_run_at) AS until FROM fleet_jobs w
        WHERE w.state = 'retrying' AND w.next_run_at > now() AND w.wait_reason = 'budget' AND w.wait_cap IN ('user-daily', 'user-monthly', 'fleet-daily')
        GROUP BY 1, 2),
      caps AS (
        SELECT h.u, COALESCE(b->'users'->h.u, b->'all') AS t, coalesce(m.month, 0) AS month, coalesce(m.today, 0) AS today
        FROM (SELECT DISTINCT head.u FROM head) h LEFT JOIN spend m ON m."user" = h.u),
      held AS (
        SELECT k.u,
               (SELECT w.cap FROM waits w WHERE w.u = k.u AND w.cap <> 'fleet-daily' ORDER BY w.until DESC LIMIT 1) AS own,
               (SELECT w.until FROM waits w WHERE w.u = k.u AND w.cap <> 'fleet-daily' ORDER BY w.until DESC LIMIT 1) AS own_until,
               CASE WHEN k.t->>'fleet' IS NOT NULL THEN (SELECT max(w.until) FROM waits w WHERE w.cap = 'fleet-daily') END AS fleet_until
        FROM caps k),
      judged AS (
        SELECT head.id, head.u, head.priority, x.own, x.own_until, x.fleet_until,
               CASE WHEN (k.t->>'monthly')::float8 - head.need < k.month THEN 'user-monthly' WHEN (k.t->>'daily')::float8 - head.need < k.today THEN 'user-daily'
                    WHEN (k.t->>'fleet')::float8 - head.need < fleet THEN 'fleet-daily' END AS spent
        FROM head JOIN held x ON x.u = head.u JOIN caps k ON k.u = head.u)
      SELECT j.id, j.u,
             COALESCE(j.spent, j.own, CASE WHEN j.fleet_until IS NOT NULL THEN 'fleet-daily' END, ''),
             CASE WHEN j.spent IS NOT NULL THEN NULL WHEN j.own IS NOT NULL THEN j.own_until ELSE j.fleet_until END
      FROM judged j ORDER BY j.priority DESC, j.id;
  END $$;`

/**
 * SQL: the USD a job's first request's prompt adds to the claim's estimate: a resume's window as its task paused (the
 * index's final_token_count) at its user's prompt rate (`b`: the ClaimBudget as jsonb); 0 for a new job.
 */
export function claimNeedSql(job: string, b: string): string {
  const caps = `COALESCE(${b}->'users'->COALESCE(${job}."user", ${b}->>'os_user'), ${b}->'all')`
  return `COALESCE((SELECT t.final_token_count FROM tasks t WHERE ${job}.kind = 'resume' AND t.uuid = ${job}.task_uuid), 0) * COALESCE((${caps}->>'prompt')::float8, 0)`
}

/** The first and last day key of the month of `day` (keys compare as text). */
export function monthRange(day: string): [string, string] {
  const month = day.slice(0, 7)
  return [`${month}-01`, `${month}-31`]
}

/** tasks.db's side: statements prepared once per connection. */
export class SqliteSpend {
  private readonly addStmt: Statement<[string, string, number]>
  private readonly totalsStmt: Statement<[string, string, string, string, string]>
  private readonly fleetStmt: Statement<[string]>
  private readonly byDayStmt: Statement<[string, string]>
  private readonly setLimitStmt: Statement<[string, string, string, string]>
  private readonly limitStmt: Statement<[string]>

  constructor(db: Db) {
    this.addStmt = db.prepare(`INSERT INTO user_spend (user, day, usd, requests) VALUES (?, ?, ?, 1)
      ON CONFLICT(user, day) DO UPDATE SET usd = usd + excluded.usd, requests = requests + 1`)
    this.totalsStmt = db.prepare(`SELECT
      (SELECT coalesce(sum(usd), 0) FROM user_spend WHERE user = ? AND day = ?) AS user_day,
      (SELECT coalesce(sum(usd), 0) FROM user_spend WHERE user = ? AND day BETWEEN ? AND ?) AS user_month`)
    this.byDayStmt = db.prepare('SELECT user, day, usd, requests FROM user_spend WHERE day BETWEEN ? AND ? ORDER BY day, user')
    this.setLimitStmt = db.prepare(`INSERT INTO llm_key_limits (key, provider, until, recorded_at) VALUES (?, ?, ?, ?)
      ON CONFLICT(key) DO UPDATE SET provider = excluded.provider, until = excluded.until, recorded_at = excluded.recorded_at`)
    this.limitStmt = db.prepare('SELECT until FROM llm_key_limits WHERE key = ?')
    this.fleetStmt = db.prepare('SELECT coalesce(sum(usd), 0) AS usd FROM user_spend WHERE day = ?')
  }

  add(user: string, day: string, usd: number): void {
    this.addStmt.run(user, day, usd)
  }

  totals(user: string, day: string): SpendTotals {
    const [from, to] = monthRange(day)
    const row = this.totalsStmt.get(user, day, user, from, to) as { user_day: number; user_month: number }
    const fleet = this.fleetStmt.get(day) as { usd: number }
    return { user_day: row.user_day, user_month: row.user_month, fleet_day: fleet.usd }
  }

  byDay(from: string, to: string): SpendRow[] {
    return this.byDayStmt.all(from, to) as SpendRow[]
  }

  setLimit(key: string, provider: string, until: string, now: string): void {
    this.setLimitStmt.run(key, provider, until, now)
  }

  limit(key: string): string | null {
    return (this.limitStmt.get(key) as { until: string } | undefined)?.until ?? null
  }
}

/**
 * What tasks.db's user_spend has already given PostgreSQL's, per tree (`source`, the
 * tasks.db path) and user and day: carrying it again adds only what was spent since
 * (docs/fleet-operations.md#joining-a-fleet), so a reindex run twice never counts twice.
 */
export const PG_SPEND_CARRIED_MIGRATION = `CREATE TABLE IF NOT EXISTS user_spend_carried (
     source TEXT NOT NULL,
     "user" TEXT NOT NULL,
     day TEXT NOT NULL,
     usd DOUBLE PRECISION NOT NULL DEFAULT 0,
     requests BIGINT NOT NULL DEFAULT 0,
     PRIMARY KEY (source, "user", day)
   );`

/** PostgreSQL's side: the statements, with their parameters in the same order as tasks.db's. */
export const PG_SPEND = {
  /** A batch of additions: `[{user, day, usd, requests}]` as one JSON parameter. */
  add: `INSERT INTO user_spend ("user", day, usd, requests)
    SELECT "user", day, usd, requests FROM jsonb_to_recordset($1::jsonb) AS s("user" TEXT, day TEXT, usd DOUBLE PRECISION, requests BIGINT)
    ON CONFLICT ("user", day) DO UPDATE SET usd = user_spend.usd + excluded.usd, requests = user_spend.requests + excluded.requests`,
  totals: `SELECT
    (SELECT coalesce(sum(usd), 0) FROM user_spend WHERE "user" = $1 AND day = $2) AS user_day,
    (SELECT coalesce(sum(usd), 0) FROM user_spend WHERE "user" = $1 AND day BETWEEN $3 AND $4) AS user_month,
    (SELECT coalesce(sum(usd), 0) FROM user_spend WHERE day = $2) AS fleet_day`,
  byDay: 'SELECT "user", day, usd, requests FROM user_spend WHERE day BETWEEN $1 AND $2 ORDER BY day, "user"',
  /** A batch of limits: `[{key, provider, until}]` as one JSON parameter. */
  setLimits: `INSERT INTO llm_key_limits (key, provider, until, recorded_at)
    SELECT key, provider, until, now() FROM jsonb_to_recordset($1::jsonb) AS l(key TEXT, provider TEXT, until TIMESTAMPTZ)
    ON CONFLICT (key) DO UPDATE SET provider = excluded.provider, until = excluded.until, recorded_at = excluded.recorded_at`,
  /** What tasks.db's rows (`$2`, JSON) hold beyond what source `$1` carried before, per user and day. */
  uncarried: `SELECT s."user", s.day, s.usd - coalesce(c.usd, 0) AS usd, greatest(s.requests - coalesce(c.requests, 0), 0)::bigint AS requests
    FROM jsonb_to_recordset($2::jsonb) AS s("user" TEXT, day TEXT, usd DOUBLE PRECISION, requests BIGINT)
    LEFT JOIN user_spend_carried c ON c.source = $1 AND c."user" = s."user" AND c.day = s.day
    WHERE s.usd > coalesce(c.usd, 0)`,
  /** The figures source `$1` has carried, as of its rows `$2` (JSON). */
  carried: `INSERT INTO user_spend_carried (source, "user", day, usd, requests)
    SELECT $1, "user", day, usd, requests FROM jsonb_to_recordset($2::jsonb) AS s("user" TEXT, day TEXT, usd DOUBLE PRECISION, requests BIGINT)
    ON CONFLICT (source, "user", day) DO UPDATE SET usd = greatest(user_spend_carried.usd, excluded.usd), requests = greatest(user_spend_carried.requests, excluded.requests)`,
  limit: `SELECT to_char(until AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS until FROM llm_key_limits WHERE key = $1`,
} as const
