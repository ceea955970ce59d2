import type { Database as Db } from 'better-sqlite3'
import type { Location } from '../fs/layout.js'

/** The task list's filters (serve's `/` and `/api/tasks`). */
export interface TaskFilter {
  user?: string | undefined
  /** A status (processing, completed, failed, …) or a location (running, paused). */
  status?: string | undefined
  /** Case-insensitive text in the uuid, repository, identifier, user, error or metadata (model, workspace; the index holds no statement). */
  text?: string | undefined
}

/** One row of a page: the columns the list shows. */
export interface ListRow {
  uuid: string
  status: string
  location: Location
  created_at: string
  completed_at: string | null
  user: string | null
  hostname: string | null
  metadata: string | null
  llm_call_count: number | null
  total_tokens: number | null
  prompt_tokens: number | null
  completion_tokens: number | null
  cached_tokens: number | null
  /** Null in rows indexed before the column (read as 0). */
  cache_write_tokens?: number | null
}

export interface ListPage {
  rows: ListRow[]
  total: number
}

const LOCATION_FILTERS = new Set(['running', 'paused'])
/** A row's fields the search line is made of (TaskRow's: task-index.ts imports this module). */
export interface SearchFields {
  uuid: string
  repository: string | null
  task_identifier: string | null
  user: string | null
  hostname: string | null
  metadata: string
  error_message: string | null
}

/**
 * Where the list's text filter looks: a row's `search` column, a short lower-case line of
 * what the list shows or names (uuid, repository, identifier, user, host, model,
 * workspace, error), written with the row. Matching the whole metadata JSON (its config
 * and all) took 3× as long over 100,000 rows. Rows an older ctxagent wrote have none:
 * their metadata and error are matched instead, until a reindex.
 */
export function searchText(row: SearchFields): string {
  let meta: { config?: { model?: unknown }; run?: { workspace?: unknown } } = {}
  try {
    meta = JSON.parse(row.metadata) as typeof meta
  } catch {
    // Not JSON: its other fields still make the line.
  }
  const text = (v: unknown) => (typeof v === 'string' ? v : '')
  return [row.uuid, row.repository, row.task_identifier, row.user, row.hostname, text(meta.config?.model), text(meta.run?.workspace), row.error_message]
    .map(text)
    .join('\n')
    .toLowerCase()
}

export const LIST_COLUMNS = [
  'uuid',
  'status',
  'location',
  'created_at',
  'completed_at',
  'user',
  'hostname',
  'metadata',
  'llm_call_count',
  'total_tokens',
  'prompt_tokens',
  'completion_tokens',
  'cached_tokens',
  'cache_write_tokens',
]

/** The filters by user, status or location: an index each. */
function keyConditions(filter: TaskFilter, q: (c: string) => string, p: (value: unknown) => string): string[] {
  const parts: string[] = []
  if (filter.user) parts.push(`${q('user')} = ${p(filter.user)}`)
  if (filter.status && LOCATION_FILTERS.has(filter.status)) parts.push(`location = ${p(filter.status)}`)
  else if (filter.status) parts.push(`status = ${p(filter.status)}`)
  return parts
}

function likeOf(text: string): string {
  return `%${text.toLowerCase().replace(/[\\%_]/g, (c) => `\\${c}`)}%`
}

interface Sql {
  /** The page, newest first (an index per filter yields it in order: task-index.ts, pg-totals.ts). */
  page: string
  /** Every match's uuid, newest first, sorted rather than read in an index's order (PostgreSQL, with a text: see sqliteListPage). */
  matches: string
  /** The count: from the totals (totals.ts) unless text is asked for, which only the rows can answer. */
  count: string
  params: unknown[]
  countParams: unknown[]
}

/**
 * The list's SQL in either dialect. Offset paging over indexes that yield rows in the
 * page's order: a page costs its offset in index steps, never a sort of the matches.
 */
export function listSql(filter: TaskFilter, dialect: 'sqlite' | 'postgres', offset: number, limit: number): Sql {
  const pg = dialect === 'postgres'
  const q = (c: string) => (pg && c === 'user' ? '"user"' : c)
  const parts: string[] = []
  const params: unknown[] = []
  const p = (value: unknown) => (params.push(value), pg ? `$${params.length}` : '?')
  parts.push(...keyConditions(filter, q, p))
  const keyWhere = parts.length ? `WHERE ${parts.join(' AND ')}` : ''
  const countParams = [...params]
  if (filter.text) {
    const like = likeOf(filter.text)
    const m = (c: string) => `${c} ${pg ? 'ILIKE' : 'LIKE'} ${p(like)} ESCAPE '\\'`
    parts.push(`(search LIKE ${p(like)} ESCAPE '\\' OR (search IS NULL AND (${m('metadata')} OR ${m('error_message')})))`)
  }
  const where = parts.length ? `WHERE ${parts.join(' AND ')}` : ''
  const rowParams = [...params]
  const page = `SELECT ${LIST_COLUMNS.map(q).join(', ')} FROM tasks ${where} ORDER BY created_at DESC, uuid DESC LIMIT ${p(limit)} OFFSET ${p(offset)}`
  const matches = `SELECT uuid FROM tasks ${where} ORDER BY created_at DESC, uuid DESC`
  const count = filter.text ? `SELECT count(*) AS n FROM tasks ${where}` : `SELECT COALESCE(SUM(tasks), 0) AS n FROM task_totals ${keyWhere}`
  return { page, matches, count, params, countParams: filter.text ? rowParams : countParams }
}

/** The users and statuses the index knows, for the filter form (from the totals: a few rows). */
export const CHOICES = {
  users: (q: string) => `SELECT DISTINCT ${q} AS u FROM task_totals WHERE ${q} <> '' ORDER BY 1 LIMIT 500`,
  statuses: 'SELECT DISTINCT status FROM task_totals ORDER BY status',
}

/**
 * A text filter reads every row it may match (no index helps a substring), so it reads
 * them once: the matches' uuids, newest first (a sort of small rows), give the count and
 * the page's uuids, whose rows are then read by key. A count and a page apart read the
 * rows twice; and walking the newest-first index to find a rare text's matches reads
 * them in the index's (random) order.
 */
export function sqliteListPage(db: Db, filter: TaskFilter, offset: number, limit: number): ListPage {
  const sql = listSql(filter, 'sqlite', offset, limit)
  if (!filter.text) {
    const total = (db.prepare(sql.count).get(...sql.countParams) as { n: number }).n
    return { rows: db.prepare(sql.page).all(...sql.params) as ListRow[], total }
  }
  // The search lines in an index of their own with the filters' columns (task-index.ts), read without the (wide) rows;
  // named, or SQLite walks the newest-first index to spare the sort and reads every row. Rows without a line apart.
  const params: unknown[] = []
  const keys = keyConditions(
    filter,
    (c) => c,
    (v) => (params.push(v), '?'),
  )
    .map((c) => `${c} AND `)
    .join('')
  const like = likeOf(filter.text)
  const matches = db
    .prepare(
      `SELECT uuid, created_at FROM tasks INDEXED BY idx_tasks_search WHERE ${keys}search LIKE ? ESCAPE '\\'
       UNION ALL SELECT uuid, created_at FROM tasks WHERE ${keys}search IS NULL AND (metadata LIKE ? ESCAPE '\\' OR error_message LIKE ? ESCAPE '\\')
       ORDER BY 2 DESC, 1 DESC`,
    )
    .pluck()
    .all(...params, like, ...params, like, like) as string[]
  const uuids = matches.slice(offset, offset + limit)
  const byKey = db.prepare(`SELECT ${LIST_COLUMNS.join(', ')} FROM tasks WHERE uuid IN (${uuids.map(() => '?').join(', ')})`)
  const rows = new Map((uuids.length ? (byKey.all(...uuids) as ListRow[]) : []).map((r) => [r.uuid, r]))
  return { rows: uuids.flatMap((u) => rows.get(u) ?? []), total: matches.length }
}

export function sqliteChoices(db: Db): { users: string[]; statuses: string[] } {
  return {
    users: (db.prepare(CHOICES.users('user')).all() as { u: string }[]).map((r) => r.u),
    statuses: (db.prepare(CHOICES.statuses).all() as { status: string }[]).map((r) => r.status),
  }
}
