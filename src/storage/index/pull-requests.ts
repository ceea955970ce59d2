import type { Database as Db } from 'better-sqlite3'

/**
 * What the forge says of a pull/merge request ctxagent opened (docs/contract.md §17): its
 * state, when and by whom it was merged or closed, when a person first answered, and the
 * commits it holds. Keyed by the request's web URL, the `pr_url` of the tasks on it.
 *
 * Which tasks are on a request (who opened it, the follow-ups, their tokens and commits)
 * is not here: it is `tasks`' `pr_url`, `pr_opened` and `delivery_commit`, derived from the
 * task directories, so `reindex` rebuilds it. These facts are the forge's, fetched by a
 * refresh (`stats --outcomes --refresh`, each `poll` pass): reindex and cleanup leave them,
 * as they leave the spend (spend.ts); a lost index has them again at the next refresh.
 */
export interface PullRequestFacts {
  url: string
  /** open, merged or closed (closed without a merge). */
  state: 'open' | 'merged' | 'closed'
  /** When the forge says it was opened (ISO 8601). */
  created_at: string | null
  merged_at: string | null
  merged_by: string | null
  closed_at: string | null
  closed_by: string | null
  /** The first review, comment or note by a person (not the bot's account, not the forge's own system notes). */
  first_response_at: string | null
  /** The commit ids the request holds, oldest first (rework: those no task of ctxagent's delivered). */
  commits: string[]
  /** The trigger label `poll` queued its issue under, where a poller knows it; null elsewhere. */
  label: string | null
  refreshed_at: string
}

const COLUMNS = [
  'url',
  'state',
  'created_at',
  'merged_at',
  'merged_by',
  'closed_at',
  'closed_by',
  'first_response_at',
  'commits',
  'label',
  'refreshed_at',
] as const

/** The tasks' link to their request, and the forge's facts (tasks.db). */
export const SQLITE_PULL_REQUESTS_MIGRATION = `ALTER TABLE tasks ADD COLUMN pr_url TEXT;
   ALTER TABLE tasks ADD COLUMN pr_opened INTEGER;
   ALTER TABLE tasks ADD COLUMN delivery_commit TEXT;
   CREATE INDEX idx_tasks_pr_url ON tasks(pr_url) WHERE pr_url IS NOT NULL;
   CREATE TABLE pull_requests (
     url TEXT PRIMARY KEY,
     state TEXT NOT NULL,
     created_at TEXT,
     merged_at TEXT,
     merged_by TEXT,
     closed_at TEXT,
     closed_by TEXT,
     first_response_at TEXT,
     commits TEXT NOT NULL DEFAULT '[]',
     label TEXT,
     refreshed_at TEXT NOT NULL
   );`

/** The same in PostgreSQL (pg-schema.ts). */
export const PG_PULL_REQUESTS_MIGRATION = `ALTER TABLE tasks ADD COLUMN IF NOT EXISTS pr_url TEXT;
   ALTER TABLE tasks ADD COLUMN IF NOT EXISTS pr_opened INTEGER;
   ALTER TABLE tasks ADD COLUMN IF NOT EXISTS delivery_commit TEXT;
   CREATE INDEX IF NOT EXISTS idx_tasks_pr_url ON tasks(pr_url) WHERE pr_url IS NOT NULL;
   CREATE TABLE IF NOT EXISTS pull_requests (
     url TEXT PRIMARY KEY,
     state TEXT NOT NULL,
     created_at TEXT,
     merged_at TEXT,
     merged_by TEXT,
     closed_at TEXT,
     closed_by TEXT,
     first_response_at TEXT,
     commits TEXT NOT NULL DEFAULT '[]',
     label TEXT,
     refreshed_at TEXT NOT NULL
   );`

const SET = COLUMNS.filter((c) => c !== 'url')
  .map((c) => `${c} = excluded.${c}`)
  .join(', ')

const row = (f: PullRequestFacts): unknown[] => COLUMNS.map((c) => (c === 'commits' ? JSON.stringify(f.commits) : f[c]))

/** Writes facts, each replacing the request's earlier ones, in one transaction. */
export function sqliteSetFacts(db: Db, facts: readonly PullRequestFacts[]): void {
  const stmt = db.prepare(
    `INSERT INTO pull_requests (${COLUMNS.join(', ')}) VALUES (${COLUMNS.map(() => '?').join(', ')}) ON CONFLICT(url) DO UPDATE SET ${SET}`,
  )
  db.transaction(() => {
    for (const f of facts) stmt.run(row(f))
  })()
}

/** Every request's facts. */
export function sqliteFacts(db: Db): PullRequestFacts[] {
  return (db.prepare(`SELECT ${COLUMNS.join(', ')} FROM pull_requests`).all() as Record<string, unknown>[]).map(decodeFacts)
}

/** PostgreSQL's statements: one request per row of a JSON batch. */
export const PG_PULL_REQUESTS = {
  upsert: `INSERT INTO pull_requests (${COLUMNS.join(', ')})
    SELECT ${COLUMNS.join(', ')} FROM jsonb_populate_recordset(NULL::pull_requests, $1::jsonb)
    ON CONFLICT (url) DO UPDATE SET ${SET}`,
  all: `SELECT ${COLUMNS.join(', ')} FROM pull_requests`,
  batch: (facts: readonly PullRequestFacts[]): string => JSON.stringify(facts.map((f) => ({ ...f, commits: JSON.stringify(f.commits) }))),
}

/** A row as the facts (commits: a JSON array of ids; anything else in it is dropped). */
export function decodeFacts(r: Record<string, unknown>): PullRequestFacts {
  const text = (v: unknown): string | null => (typeof v === 'string' ? v : null)
  let commits: string[] = []
  try {
    const parsed = JSON.parse(String(r.commits ?? '[]')) as unknown
    if (Array.isArray(parsed)) commits = parsed.filter((c): c is string => typeof c === 'string')
  } catch {
    // A damaged row counts as no commits known: the next refresh writes it again.
  }
  const state = r.state === 'merged' || r.state === 'closed' ? r.state : 'open'
  return {
    url: String(r.url),
    state,
    created_at: text(r.created_at),
    merged_at: text(r.merged_at),
    merged_by: text(r.merged_by),
    closed_at: text(r.closed_at),
    closed_by: text(r.closed_by),
    first_response_at: text(r.first_response_at),
    commits,
    label: text(r.label),
    refreshed_at: String(r.refreshed_at ?? ''),
  }
}
