import type BetterSqlite3 from 'better-sqlite3'
import type { Database as Db, Statement } from 'better-sqlite3'
import { chmodSync, existsSync, lstatSync, renameSync, rmSync } from 'node:fs'
import { createRequire } from 'node:module'
import { basename, dirname, join } from 'node:path'
import { CorruptRecordError } from '../../errors.js'
import { assertRegularFiles } from '../fs/files.js'
import type { Location } from '../fs/layout.js'
import type { DiskUse } from '../fs/disk.js'
import { rebuildStatements, SQLITE } from './totals.js'
import {
  sqliteCountersMigration,
  sqliteDeliveriesMigration,
  sqliteEnvMigration,
  sqliteSummaryTokensMigration,
  sqliteToolCallsMigration,
  sqliteTotalsMigration,
} from './sqlite-totals-migrations.js'
import { searchText } from './task-list.js'
import { SqliteSpend, SQLITE_SPEND_MIGRATION } from './spend.js'
import { SQLITE_PULL_REQUESTS_MIGRATION } from './pull-requests.js'
import { byCodeUnits } from '../../text.js'

let loaded: typeof BetterSqlite3 | undefined

/**
 * better-sqlite3, required when the first index is opened: loading its JavaScript costs
 * ~5 ms of start-up, which every command paid (--version and view among them) though
 * most never open tasks.db. The native addon was already loaded only by the first open.
 */
function sqlite(): typeof BetterSqlite3 {
  return (loaded ??= createRequire(import.meta.url)('better-sqlite3') as typeof BetterSqlite3)
}

let addon: string | null | undefined

/**
 * The native addon's file, given to better-sqlite3 as `nativeBinding`: without it the
 * library asks the `bindings` package, which reads a stack trace and tries a dozen paths
 * (~10 ms of every command that opens tasks.db). The places tried are bindings' first
 * three, in its order; none there (another layout): null, and bindings looks as before.
 */
function nativeBinding(): string | null {
  if (addon !== undefined) return addon
  const root = dirname(createRequire(import.meta.url).resolve('better-sqlite3/package.json'))
  addon = ['build', 'build/Debug', 'build/Release'].map((dir) => join(root, dir, 'better_sqlite3.node')).find((file) => existsSync(file)) ?? null
  return addon
}

/** One row of `tasks`: the docs/contract.md §7 columns plus what stats needs. */
export interface TaskRow {
  uuid: string
  status: string
  location: Location
  task_type: string
  task_identifier: string | null
  repository: string | null
  user: string | null
  hostname: string | null
  created_at: string
  started_at: string | null
  updated_at: string | null
  completed_at: string | null
  metadata: string
  total_messages: number
  total_summaries: number
  total_tool_calls: number
  /** total_tool_calls by tool and outcome, JSON `{tool: {outcome: n}}` (storage/task/tool-tally.ts); absent or null: all unknown (rows written before). */
  tool_calls?: string | null
  llm_call_count: number
  total_tokens: number
  /** total_tokens split as the provider reported it (state.json's prompt/completion/cached), so that stats need not read every state.json; null where the row was written without it. */
  prompt_tokens: number | null
  completion_tokens: number | null
  cached_tokens: number | null
  /** Prompt tokens written to the provider's cache (state.json cache_write_tokens); absent or null where the row was written without it. */
  cache_write_tokens?: number | null
  /** LLM requests that were not turns: compactions' summaries and the final summary (state.json compaction_tokens.requests, final_summary_tokens.requests); absent or null as above. */
  summary_calls?: number | null
  final_summary_calls?: number | null
  /** The tokens of the compactions' and final summaries' requests (state.json compaction_tokens + final_summary_tokens); absent or null as above. */
  summary_prompt_tokens?: number | null
  summary_completion_tokens?: number | null
  summary_cached_tokens?: number | null
  /** How the task's delivery ended (storage/task/delivery.ts deliveryResult); null: none asked for, or not ended. */
  delivery_result?: string | null
  /** The environment's cache result (hit, miss, failed) and its setup's time (ms), from state.json `environment`; null: none (env-totals.ts). */
  env_cache?: string | null
  env_setup_ms?: number | null
  compression_count: number
  final_token_count: number | null
  final_message_count: number | null
  error_message: string | null
  /** Null for tasks indexed without measuring (reindex): stats measures and caches them. */
  disk_bytes: number | null
  disk_bytes_raw: number | null
  /** The pull/merge request the task is on, its web URL (docs/contract.md §17); absent or null: none. */
  pr_url?: string | null
  /** 1: the task opened it; 0: a follow-up (or a task continuing it); null: none. */
  pr_opened?: number | null
  /** The commit its delivery pushed there (state.json delivery.commit, when pushed). */
  delivery_commit?: string | null
}

/** The columns that make a task key (docs/contract.md §5): task_type, task_identifier, repository, user. */
export type TaskKeyColumns = Pick<TaskRow, 'task_type' | 'task_identifier' | 'repository' | 'user'>

/** Migrations, numbered by their position; `user_version` records how many ran. */
const MIGRATIONS: readonly string[] = [
  `CREATE TABLE tasks (
     uuid TEXT PRIMARY KEY,
     status TEXT NOT NULL,
     task_type TEXT NOT NULL,
     task_identifier TEXT,
     repository TEXT,
     user TEXT,
     created_at TEXT NOT NULL,
     updated_at TEXT,
     completed_at TEXT,
     metadata TEXT,
     total_messages INTEGER DEFAULT 0,
     total_summaries INTEGER DEFAULT 0,
     total_tool_calls INTEGER DEFAULT 0,
     final_token_count INTEGER,
     final_message_count INTEGER,
     error_message TEXT
   );
   CREATE INDEX idx_tasks_status ON tasks(status);
   CREATE INDEX idx_tasks_task_type ON tasks(task_type);
   CREATE INDEX idx_tasks_repository ON tasks(repository);
   CREATE INDEX idx_tasks_user ON tasks(user);
   CREATE INDEX idx_tasks_completed_at ON tasks(completed_at);`,
  `ALTER TABLE tasks ADD COLUMN location TEXT NOT NULL DEFAULT 'running';
   ALTER TABLE tasks ADD COLUMN hostname TEXT;
   ALTER TABLE tasks ADD COLUMN started_at TEXT;
   ALTER TABLE tasks ADD COLUMN llm_call_count INTEGER DEFAULT 0;
   ALTER TABLE tasks ADD COLUMN total_tokens INTEGER DEFAULT 0;
   ALTER TABLE tasks ADD COLUMN compression_count INTEGER DEFAULT 0;
   CREATE INDEX idx_tasks_location ON tasks(location);
   CREATE INDEX idx_tasks_created_at ON tasks(created_at);`,
  // Disk use, cached for settled tasks so that stats need not walk every directory.
  `ALTER TABLE tasks ADD COLUMN disk_bytes INTEGER;
   ALTER TABLE tasks ADD COLUMN disk_bytes_raw INTEGER;`,
  // The token split, so that stats sums columns instead of reading every task's state.json.
  `ALTER TABLE tasks ADD COLUMN prompt_tokens INTEGER;
   ALTER TABLE tasks ADD COLUMN completion_tokens INTEGER;
   ALTER TABLE tasks ADD COLUMN cached_tokens INTEGER;`,
  // Running totals kept by triggers (totals.ts): /metrics reads them instead of summing every row.
  sqliteTotalsMigration(),
  // The task list's filters and paging, newest first: each an index that yields a page in order.
  `CREATE INDEX idx_tasks_user_created ON tasks(user, created_at, uuid);
   CREATE INDEX idx_tasks_status_created ON tasks(status, created_at, uuid);
   CREATE INDEX idx_tasks_location_created ON tasks(location, created_at, uuid);
   CREATE INDEX idx_tasks_created_uuid ON tasks(created_at, uuid);`,
  // The list's text filter's line (task-list.ts); NULL in rows written before, until a reindex.
  // Indexed with the filters' columns, so that a text filter reads this index, not the wide rows.
  `ALTER TABLE tasks ADD COLUMN search TEXT;
   CREATE INDEX idx_tasks_search ON tasks(search, created_at, uuid, user, status, location);`,
  // Tool calls by tool and outcome: a JSON column per row, summed into task_tool_calls by triggers (totals.ts).
  sqliteToolCallsMigration(),
  // Spend per user per day and usage limits per API key, for the budgets (spend.ts): kept by cleanup and reindex.
  SQLITE_SPEND_MIGRATION,
  // Cache writes and the requests that were not turns (summaries, final summaries), as columns and counters (totals.ts).
  sqliteCountersMigration(),
  // Deliveries by result, as a column and counters (totals.ts; ctxagent_deliveries_total).
  sqliteDeliveriesMigration(),
  // The pull/merge requests ctxagent opened: the tasks' link to them, and the forge's facts (pull-requests.ts).
  SQLITE_PULL_REQUESTS_MIGRATION,
  // The repositories' environments: each row's cache result and setup time, as columns and counters (env-totals.ts).
  sqliteEnvMigration(),
  // The summaries' tokens, as columns and counters, so that /metrics' cost is the task's bill (totals.ts).
  sqliteSummaryTokensMigration(),
]

export const COLUMNS: readonly (keyof TaskRow)[] = [
  'uuid',
  'status',
  'location',
  'task_type',
  'task_identifier',
  'repository',
  'user',
  'hostname',
  'created_at',
  'started_at',
  'updated_at',
  'completed_at',
  'metadata',
  'total_messages',
  'total_summaries',
  'total_tool_calls',
  'llm_call_count',
  'total_tokens',
  'compression_count',
  'final_token_count',
  'final_message_count',
  'error_message',
  'disk_bytes',
  'disk_bytes_raw',
  'prompt_tokens',
  'completion_tokens',
  'cached_tokens',
  'tool_calls',
  'cache_write_tokens',
  'summary_calls',
  'final_summary_calls',
  'delivery_result',
  'env_cache',
  'env_setup_ms',
  'pr_url',
  'pr_opened',
  'delivery_commit',
  'summary_prompt_tokens',
  'summary_completion_tokens',
  'summary_cached_tokens',
]

/**
 * tasks.db: an index of the task directories, never the truth (docs/contract.md §7). Opened in
 * WAL mode with a busy timeout so that many agent processes and operator commands
 * can use it at once.
 */
export class TaskIndex {
  private readonly upsertStmt: Statement<unknown[]>
  private readonly removeStmt: Statement<[string]>
  private readonly diskStmt: Statement<[number, number, string]>
  /** Spend per user per day, and usage limits per API key (spend.ts). */
  readonly spend: SqliteSpend
  /** Told of every disk-use cache write: an in-memory copy of PostgreSQL's index passes them back. */
  onDiskUse: ((measured: readonly { uuid: string; disk: DiskUse }[]) => void) | null = null

  private constructor(readonly db: Db) {
    this.upsertStmt = db.prepare(
      `INSERT INTO tasks (${COLUMNS.join(', ')}, search) VALUES (${COLUMNS.map(() => '?').join(', ')}, ?)
       ON CONFLICT(uuid) DO UPDATE SET ${[...COLUMNS.filter((c) => c !== 'uuid'), 'search'].map((c) => `${c} = excluded.${c}`).join(', ')}`,
    )
    this.removeStmt = db.prepare('DELETE FROM tasks WHERE uuid = ?')
    this.diskStmt = db.prepare('UPDATE tasks SET disk_bytes = ?, disk_bytes_raw = ? WHERE uuid = ?')
    this.spend = new SqliteSpend(db)
  }

  /** Opens (creating and migrating) the index at `path`. */
  static open(path: string): TaskIndex {
    if (path !== ':memory:') assertIndexFiles(path)
    const created = path !== ':memory:' && !existsSync(path)
    const binding = nativeBinding()
    const db = new (sqlite())(path, { timeout: 10_000, ...(binding !== null ? { nativeBinding: binding } : {}) })
    try {
      if (created) chmodSync(path, 0o600)
      db.pragma('journal_mode = WAL')
      db.pragma('synchronous = NORMAL')
      migrate(db)
      return new TaskIndex(db)
    } catch (err) {
      db.close()
      // A creation that failed (a full disk) leaves no empty tasks.db to be trusted later.
      if (created) for (const file of [path, `${path}-wal`, `${path}-shm`]) rmSync(file, { force: true })
      throw err
    }
  }

  /**
   * Before a rebuild: a tasks.db that SQLite finds damaged (not a database, corrupt)
   * is renamed aside with its -wal and -shm (`tasks.db.damaged-<time>`), never deleted:
   * the task directories are the truth, the old file stays for whoever wants to look.
   * Returns the new name, or null when the index opened (or there was none).
   */
  static setAsideIfDamaged(path: string, now: Date): string | null {
    const present = INDEX_FILES.filter((suffix) => lstatSync(path + suffix, { throwIfNoEntry: false }) !== undefined)
    if (present.length === 0) return null
    try {
      TaskIndex.open(path).close()
      return null
    } catch (err) {
      const code = String((err as { code?: unknown }).code ?? '')
      if (!(err instanceof CorruptRecordError) && !code.startsWith('SQLITE_CORRUPT') && !code.startsWith('SQLITE_NOTADB')) throw err
    }
    // Renamed, never followed: a link moves aside as a link, a directory as a directory.
    const aside = `${path}.damaged-${now.toISOString().replace(/[:.]/g, '-')}`
    for (const suffix of present) renameSync(path + suffix, aside + suffix)
    return aside
  }

  /** Opens an existing index read-only, or returns null when there is none. */
  static openExisting(path: string): TaskIndex | null {
    if (!existsSync(path)) return null
    return TaskIndex.open(path)
  }

  upsert(row: TaskRow): void {
    this.upsertStmt.run(values(row))
  }

  remove(uuid: string): void {
    this.removeStmt.run(uuid)
  }

  /**
   * Replaces every row (reindex) in one transaction: rows in key order, secondary
   * indexes dropped and rebuilt around the bulk insert (as the migrations defined
   * them), which is cheaper than maintaining them row by row.
   */
  replaceAll(rows: readonly TaskRow[]): void {
    const sorted = [...rows].sort((a, b) => byCodeUnits(a.uuid, b.uuid))
    // Immediate: a transaction that reads first and writes later cannot wait for another
    // writer (SQLite answers SQLITE_BUSY_SNAPSHOT at once); one that takes the write lock first can.
    // The totals' triggers too: their sums are made again once, from the new rows, keeping
    // what deleted tasks left in the counters (totals.ts).
    const rebuild = rebuildStatements(SQLITE)
    this.db
      .transaction(() => {
        const dropped = this.db
          .prepare(`SELECT type, name, sql FROM sqlite_master WHERE type IN ('index', 'trigger') AND tbl_name = 'tasks' AND sql IS NOT NULL`)
          .all() as { type: string; name: string; sql: string }[]
        for (const sql of rebuild.before) this.db.exec(sql)
        for (const item of dropped) this.db.exec(`DROP ${item.type === 'index' ? 'INDEX' : 'TRIGGER'} ${item.name}`)
        this.db.exec('DELETE FROM tasks')
        for (const row of sorted) this.upsertStmt.run(values(row))
        for (const item of dropped) this.db.exec(item.sql)
        for (const sql of rebuild.after) this.db.exec(sql)
      })
      .immediate()
  }

  /** Caches measured disk use, in one transaction however many tasks (one commit each would cost more than the measuring). */
  setDiskUse(measured: readonly { uuid: string; disk: DiskUse }[]): void {
    this.db.transaction(() => {
      for (const { uuid, disk } of measured) this.diskStmt.run(disk.bytes, disk.raw, uuid)
    })()
    this.onDiskUse?.(measured)
  }

  /** Tasks whose indexed status is `status`. */
  uuidsWithStatus(status: string): string[] {
    return (this.db.prepare('SELECT uuid FROM tasks WHERE status = ?').all(status) as { uuid: string }[]).map((r) => r.uuid)
  }

  /** Finished tasks (completed or failed) with this task key, newest first: the candidates for inheritance. */
  finishedWithKey(key: TaskKeyColumns): Pick<TaskRow, 'uuid' | 'location' | 'status' | 'completed_at'>[] {
    return this.db
      .prepare(
        `SELECT uuid, location, status, completed_at FROM tasks
         WHERE task_type = ? AND task_identifier IS ? AND repository IS ? AND user IS ? AND status IN ('completed', 'failed')
         ORDER BY completed_at DESC LIMIT 20`,
      )
      .all(key.task_type, key.task_identifier, key.repository, key.user) as Pick<TaskRow, 'uuid' | 'location' | 'status' | 'completed_at'>[]
  }

  /** How many tasks the index places in `location` (compared with a directory listing to notice drift). */
  countAt(location: Location): number {
    return (this.db.prepare('SELECT count(*) AS n FROM tasks WHERE location = ?').get(location) as { n: number }).n
  }

  /** Every row's uuid and location (reconcileIndex compares them with the directories). */
  locations(): Map<string, Location> {
    const rows = this.db.prepare('SELECT uuid, location FROM tasks').raw().all() as [string, Location][]
    return new Map(rows)
  }

  get(uuid: string): TaskRow | undefined {
    return this.db.prepare(`SELECT ${COLUMNS.join(', ')} FROM tasks WHERE uuid = ?`).get(uuid) as TaskRow | undefined
  }

  close(): void {
    this.db.close()
  }
}

/** Positional parameters: binding 22 named ones per row costs more than the insert. */
function values(row: TaskRow): unknown[] {
  return [...COLUMNS.map((column) => row[column] ?? null), searchText(row)]
}

function migrate(db: Db): void {
  const version = db.pragma('user_version', { simple: true }) as number
  if (version >= MIGRATIONS.length) return
  db.transaction(() => {
    // Re-read inside the transaction: another process may have migrated meanwhile.
    const current = db.pragma('user_version', { simple: true }) as number
    for (let i = current; i < MIGRATIONS.length; i++) db.exec(MIGRATIONS[i] as string)
    db.pragma(`user_version = ${MIGRATIONS.length}`)
  }).immediate()
}

/** tasks.db and the files SQLite keeps beside it. */
const INDEX_FILES = ['', '-wal', '-shm', '-journal'] as const

/**
 * tasks.db and its -wal, -shm and -journal must be regular files when present: SQLite
 * would follow a link out of the tree (and write there), and a directory or a FIFO
 * gives errors that say nothing of the cause. `reindex` sets such files aside.
 */
function assertIndexFiles(path: string): void {
  assertRegularFiles(
    dirname(path),
    INDEX_FILES.map((suffix) => basename(path) + suffix),
    'run ctxagent reindex: it sets it aside and rebuilds the index',
  )
}
