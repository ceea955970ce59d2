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
}

export interface ListPage {
  rows: ListRow[]
  total: number
}

const LOCATION_FILTERS = new Set(['running', 'paused'])
/**
 * Where text is looked for: metadata is the task's metadata.json as JSON, which holds its
 * uuid, repository, identifier, user, host and model; the error is the only other place.
 * (Matching the same text again in the uuid, repository… columns doubled the time of a
 * count over 100,000 rows, for nothing.)
 */
const TEXT_COLUMNS = ['metadata', 'error_message']
export const LIST_COLUMNS = ['uuid', 'status', 'location', 'created_at', 'completed_at', 'user', 'hostname', 'metadata', 'llm_call_count', 'total_tokens', 'prompt_tokens', 'completion_tokens', 'cached_tokens']

interface Sql {
  /** The page, newest first (an index per filter yields it in order: task-index.ts, pg-totals.ts). */
  page: string
  /** The same page from the matching rows sorted, not from an index in order (SQLite; for a text that few rows match). */
  sortedPage: string
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
  if (filter.user) parts.push(`${q('user')} = ${p(filter.user)}`)
  if (filter.status && LOCATION_FILTERS.has(filter.status)) parts.push(`location = ${p(filter.status)}`)
  else if (filter.status) parts.push(`status = ${p(filter.status)}`)
  const keyWhere = parts.length ? `WHERE ${parts.join(' AND ')}` : ''
  const countParams = [...params]
  if (filter.text) {
    const like = `%${filter.text.replace(/[\\%_]/g, (c) => `\\${c}`)}%`
    parts.push(`(${TEXT_COLUMNS.map((c) => `${q(c)} ${pg ? 'ILIKE' : 'LIKE'} ${p(like)} ESCAPE '\\'`).join(' OR ')})`)
  }
  const where = parts.length ? `WHERE ${parts.join(' AND ')}` : ''
  const rowParams = [...params]
  const page = `SELECT ${LIST_COLUMNS.map(q).join(', ')} FROM tasks ${where} ORDER BY created_at DESC, uuid DESC LIMIT ${p(limit)} OFFSET ${p(offset)}`
  // Unary +: not an index's order, so SQLite scans (a text match cannot use an index) and sorts only the matches.
  const sortedPage = page.replace('ORDER BY created_at DESC, uuid DESC', 'ORDER BY +created_at DESC, +uuid DESC')
  const count = filter.text ? `SELECT count(*) AS n FROM tasks ${where}` : `SELECT COALESCE(SUM(tasks), 0) AS n FROM task_totals ${keyWhere}`
  return { page, sortedPage, count, params, countParams: filter.text ? rowParams : countParams }
}

/** The users and statuses the index knows, for the filter form (from the totals: a few rows). */
export const CHOICES = {
  users: (q: string) => `SELECT DISTINCT ${q} AS u FROM task_totals WHERE ${q} <> '' ORDER BY 1 LIMIT 500`,
  statuses: 'SELECT DISTINCT status FROM task_totals ORDER BY status',
}

/** Up to this many matches of a text, the page is sorted from them: walking the newest-first index to find a few rare matches reads every row in the index's (random) order. */
const SORT_MATCHES = 5_000

export function sqliteListPage(db: Db, filter: TaskFilter, offset: number, limit: number): ListPage {
  const sql = listSql(filter, 'sqlite', offset, limit)
  const total = (db.prepare(sql.count).get(...sql.countParams) as { n: number }).n
  const page = filter.text && total <= SORT_MATCHES ? sql.sortedPage : sql.page
  return { rows: db.prepare(page).all(...sql.params) as ListRow[], total }
}

export function sqliteChoices(db: Db): { users: string[]; statuses: string[] } {
  return {
    users: (db.prepare(CHOICES.users('user')).all() as { u: string }[]).map((r) => r.u),
    statuses: (db.prepare(CHOICES.statuses).all() as { status: string }[]).map((r) => r.status),
  }
}
