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
