import type { Pool, PoolClient } from 'pg'
import type { DiskUse } from '../fs/disk.js'
import { LOCATIONS } from '../fs/layout.js'
import type { Location } from '../fs/layout.js'
import { connectPool, inTransaction, pgReason } from './pg-pool.js'
import { indexSleep, indexWaitsEnded } from './pg-patience.js'
import { migrate } from './pg-schema.js'
import { pgTotals, POSTGRES } from './pg-totals.js'
import { rebuildStatements } from './totals.js'
import type { IndexTotals } from './totals.js'
import { CHOICES, LIST_COLUMNS, listSql, searchText } from './task-list.js'
import type { ListPage, ListRow, TaskFilter } from './task-list.js'
import type { FinishedRow, IndexStore } from './store.js'
import { COLUMNS, TaskIndex } from './task-index.js'
import type { TaskKeyColumns, TaskRow } from './task-index.js'
import { monthRange, PG_SPEND } from './spend.js'
import { carrySpend, hostSpend } from './spend-carry.js'
import type { SpendRow, SpendTotals } from './spend.js'
import { decodeFacts, PG_PULL_REQUESTS, sqliteSetFacts } from './pull-requests.js'
import type { PullRequestFacts } from './pull-requests.js'

/** Columns PostgreSQL returns as text (BIGINT) that a TaskRow holds as numbers. */
const NUMERIC = new Set<keyof TaskRow>([
  'total_messages',
  'total_summaries',
  'total_tool_calls',
  'llm_call_count',
  'total_tokens',
  'compression_count',
  'final_token_count',
  'final_message_count',
  'disk_bytes',
  'disk_bytes_raw',
  'prompt_tokens',
  'completion_tokens',
  'cached_tokens',
  'cache_write_tokens',
  'summary_calls',
  'final_summary_calls',
  'summary_prompt_tokens',
  'summary_completion_tokens',
  'summary_cached_tokens',
])
const LIST_NUMERIC = ['llm_call_count', 'total_tokens', 'prompt_tokens', 'completion_tokens', 'cached_tokens', 'cache_write_tokens']
const SELECT = COLUMNS.map((c) => `"${c}"`).join(', ')
/** Rows with their search line (task-list.ts), each a JSON object of a batch. */
const UPSERT = `INSERT INTO tasks (${SELECT}, search) SELECT ${SELECT}, search FROM jsonb_populate_recordset(NULL::tasks, $1::jsonb)
  ON CONFLICT (uuid) DO UPDATE SET ${[...COLUMNS.filter((c) => c !== 'uuid'), 'search'].map((c) => `"${c}" = excluded."${c}"`).join(', ')}`
const batch = (rows: readonly TaskRow[]): string => JSON.stringify(rows.map((row) => ({ ...row, search: searchText(row) })))
/** Rows per statement in a rebuild: one JSON parameter each, well under PostgreSQL's limits. */
const BATCH = 2_000
/** How long close() keeps retrying queued writes before it leaves them to reindex. */
const CLOSE_PATIENCE_MS = 10_000

/**
 * The index in PostgreSQL (docs/contract.md §14.1). Writes are queued per task (the latest row
 * wins) and flushed in the background in one transaction; a failed flush is retried
 * with backoff, so a task keeps running while the database is away (docs/contract.md §14.3).
 */
let ahead: { url: string; store: Promise<PgStore>; ping: NodeJS.Timeout } | null = null

export class PgStore implements IndexStore {
  readonly name = 'PostgreSQL'
  /** uuid → its newest row, or null for a removal. */
  private pending = new Map<string, TaskRow | null>()
  private pendingDisk = new Map<string, DiskUse>()
  /** Spend to add, by user and day (summed while it waits); usage limits to record, by key hash. */
  private pendingSpend = new Map<string, { user: string; day: string; usd: number; requests: number }>()
  private pendingLimits = new Map<string, { key: string; provider: string; until: string }>()
  private flushing: Promise<boolean> | null = null
  private timer: NodeJS.Timeout | null = null
  private failures = 0
  private lastError: string | null = null
  private migrated = false

  private constructor(
    readonly pool: Pool,
    private warn: (message: string) => void,
  ) {}

  /**
   * A worker's warm child connects, and checks the schema, before it has a task
   * (src/commands/worker.ts): the task's own lazy open of the same URL takes that store
   * instead of connecting then. Its connection is kept from idling out meanwhile.
   */
  static openAhead(url: string): void {
    const store = PgStore.open(url, () => undefined, { lazy: true })
    const ping = setInterval(() => void store.then((s) => s.pool.query('SELECT 1')).catch(() => undefined), 20_000)
    ping.unref()
    ahead = { url, store, ping }
  }

  /**
   * Connects, and creates or migrates the tables (under an advisory lock). With
   * `lazy`, a database that cannot be reached now is no error: writes queue until it
   * can (an agent started during an outage still gets its rows in), reads fail.
   */
  /** The store opened ahead and not taken, closed. */
  static async dropAhead(): Promise<void> {
    const early = ahead
    ahead = null
    if (early === null) return
    clearInterval(early.ping)
    await (await early.store).pool.end().catch(() => undefined)
  }

  static async open(url: string, warn: (message: string) => void, options: { lazy?: boolean } = {}): Promise<PgStore> {
    const early = ahead !== null && ahead.url === url && options.lazy === true ? ahead : null
    if (early !== null) {
      ahead = null
      clearInterval(early.ping)
      const store = await early.store
      // Not reached ahead: this open tries again, and says so if it fails now.
      if (store.lastError === null) {
        store.warn = warn
        return store
      }
      await store.pool.end().catch(() => undefined)
    }
    const pool = await connectPool(url, 'index')
    const store = new PgStore(pool, warn)
    try {
      await store.ensureSchema()
    } catch (err) {
      if (options.lazy === true) {
        store.lastError = pgReason(err)
        warn(`the PostgreSQL index cannot be reached now (${store.lastError}); its writes wait for it`)
        return store
      }
      await pool.end().catch(() => undefined)
      throw err
    }
    return store
  }

  private async ensureSchema(): Promise<void> {
    if (this.migrated) return
    const client = await this.pool.connect()
    try {
      await migrate(client)
      this.migrated = true
    } finally {
      client.release()
    }
  }

  upsert(row: TaskRow): void {
    this.pending.set(row.uuid, { ...row })
    this.schedule(0)
  }

  remove(uuid: string): void {
    this.pending.set(uuid, null)
    this.pendingDisk.delete(uuid)
    this.schedule(0)
  }

  setDiskUse(measured: readonly { uuid: string; disk: DiskUse }[]): void {
    for (const { uuid, disk } of measured) this.pendingDisk.set(uuid, disk)
    if (measured.length > 0) this.schedule(0)
  }

  addSpend(user: string, day: string, usd: number): void {
    const id = `${user}\u0000${day}`
    const before = this.pendingSpend.get(id)
    this.pendingSpend.set(id, { user, day, usd: (before?.usd ?? 0) + usd, requests: (before?.requests ?? 0) + 1 })
    this.schedule(0)
  }

  async spendTotals(user: string, day: string): Promise<SpendTotals> {
    await this.drain()
    await this.ensureSchema()
    const [from, to] = monthRange(day)
    const row = (await this.pool.query<Record<keyof SpendTotals, number>>(PG_SPEND.totals, [user, day, from, to])).rows[0]
    return { user_day: Number(row?.user_day ?? 0), user_month: Number(row?.user_month ?? 0), fleet_day: Number(row?.fleet_day ?? 0) }
  }

  async spendByDay(from: string, to: string): Promise<SpendRow[]> {
    await this.drain()
    await this.ensureSchema()
    const rows = (await this.pool.query<SpendRow>(PG_SPEND.byDay, [from, to])).rows
    return rows.map((r) => ({ user: r.user, day: r.day, usd: Number(r.usd), requests: Number(r.requests) }))
  }

  /** tasks.db's spend at `dbPath` carried into user_spend, once (spend-carry.ts); the USD added. */
  async carryHostSpend(dbPath: string): Promise<number> {
    const rows = hostSpend(dbPath)
    if (rows.length === 0) return 0
    await this.drain()
    await this.ensureSchema()
    return inTransaction(this.pool, (client) => carrySpend(client, dbPath, rows))
  }

  setKeyLimit(key: string, provider: string, until: string): void {
    this.pendingLimits.set(key, { key, provider, until })
    this.schedule(0)
  }

  async keyLimit(key: string): Promise<string | null> {
    await this.drain()
    await this.ensureSchema()
    return (await this.pool.query<{ until: string }>(PG_SPEND.limit, [key])).rows[0]?.until ?? null
  }

  async replaceAll(rows: readonly TaskRow[]): Promise<void> {
    await this.drain()
    await this.ensureSchema()
    const rebuild = rebuildStatements(POSTGRES)
    await this.transaction(async (client) => {
      // The totals' trigger stands aside for this transaction; their sums are made once, after.
      await client.query(`SET LOCAL ctxagent.rebuilding = 'on'`)
      for (const sql of rebuild.before) await client.query(sql)
      await client.query('DELETE FROM tasks')
      for (let i = 0; i < rows.length; i += BATCH) await client.query(UPSERT, [batch(rows.slice(i, i + BATCH))])
      for (const sql of rebuild.after) await client.query(sql)
    })
  }

  async uuidsWithStatus(status: string): Promise<string[]> {
    await this.drain()
    await this.ensureSchema()
    return (await this.pool.query<{ uuid: string }>('SELECT uuid FROM tasks WHERE status = $1', [status])).rows.map((r) => r.uuid)
  }

  async finishedWithKey(key: TaskKeyColumns): Promise<FinishedRow[]> {
    await this.drain()
    await this.ensureSchema()
    // NULLS LAST: as SQLite orders them, so both indexes pick the same candidate.
    const result = await this.pool.query<FinishedRow>(
      `SELECT uuid, location, status, completed_at FROM tasks
       WHERE task_type = $1 AND task_identifier IS NOT DISTINCT FROM $2 AND repository IS NOT DISTINCT FROM $3
         AND "user" IS NOT DISTINCT FROM $4 AND status IN ('completed', 'failed')
       ORDER BY completed_at DESC NULLS LAST LIMIT 20`,
      [key.task_type, key.task_identifier, key.repository, key.user],
    )
    return result.rows
  }

  async counts(): Promise<Record<Location, number>> {
    await this.drain()
    await this.ensureSchema()
    const counts = Object.fromEntries(LOCATIONS.map((l) => [l, 0])) as Record<Location, number>
    const result = await this.pool.query<{ location: Location; n: string }>('SELECT location, count(*) AS n FROM tasks GROUP BY location')
    for (const row of result.rows) if (row.location in counts) counts[row.location] = Number(row.n)
    return counts
  }

  async locations(): Promise<Map<string, Location>> {
    await this.drain()
    await this.ensureSchema()
    const result = await this.pool.query<{ uuid: string; location: Location }>('SELECT uuid, location FROM tasks')
    return new Map(result.rows.map((r) => [r.uuid, r.location]))
  }

  async get(uuid: string): Promise<TaskRow | undefined> {
    await this.drain()
    await this.ensureSchema()
    const row = (await this.pool.query<Record<string, unknown>>(`SELECT ${SELECT} FROM tasks WHERE uuid = $1`, [uuid])).rows[0]
    return row === undefined ? undefined : decode(row)
  }

  async totals(): Promise<IndexTotals> {
    await this.drain()
    await this.ensureSchema()
    return pgTotals(this.pool)
  }

  async listPage(filter: TaskFilter, offset: number, limit: number): Promise<ListPage> {
    await this.drain()
    await this.ensureSchema()
    const sql = listSql(filter, 'postgres', offset, limit)
    const decode = (r: Record<string, unknown>) =>
      ({ ...r, ...Object.fromEntries(LIST_NUMERIC.map((c) => [c, r[c] === null || r[c] === undefined ? null : Number(r[c])])) }) as unknown as ListRow
    if (filter.text) {
      // One pass over the rows a text may match, as tasks.db does it (task-list.ts).
      const matches = (await this.pool.query<{ uuid: string }>(sql.matches, sql.countParams)).rows.map((r) => r.uuid)
      const uuids = matches.slice(offset, offset + limit)
      const found = await this.pool.query<Record<string, unknown>>(
        `SELECT ${LIST_COLUMNS.map((c) => `"${c}"`).join(', ')} FROM tasks WHERE uuid = ANY($1::text[])`,
        [uuids],
      )
      const rows = new Map(found.rows.map((r) => [r.uuid as string, decode(r)]))
      return { rows: uuids.flatMap((u) => rows.get(u) ?? []), total: matches.length }
    }
    const [count, page] = await Promise.all([
      this.pool.query<{ n: string }>(sql.count, sql.countParams),
      this.pool.query<Record<string, unknown>>(sql.page, sql.params),
    ])
    return { rows: page.rows.map(decode), total: Number(count.rows[0]?.n ?? 0) }
  }

  async choices(): Promise<{ users: string[]; statuses: string[] }> {
    await this.drain()
    await this.ensureSchema()
    const [users, statuses] = await Promise.all([
      this.pool.query<{ u: string }>(CHOICES.users('"user"')),
      this.pool.query<{ status: string }>(CHOICES.statuses),
    ])
    return { users: users.rows.map((r) => r.u), statuses: statuses.rows.map((r) => r.status) }
  }

  async reporting(): Promise<{ db: TaskIndex; owned: boolean }> {
    await this.drain()
    await this.ensureSchema()
    const rows = (await this.pool.query<Record<string, unknown>>(`SELECT ${SELECT} FROM tasks`)).rows.map(decode)
    const facts = (await this.pool.query<Record<string, unknown>>(PG_PULL_REQUESTS.all)).rows.map(decodeFacts)
    const copy = TaskIndex.open(':memory:')
    copy.replaceAll(rows)
    sqliteSetFacts(copy.db, facts)
    copy.onDiskUse = (measured) => this.setDiskUse(measured)
    return { db: copy, owned: false }
  }

  async setPullRequestFacts(facts: readonly PullRequestFacts[]): Promise<void> {
    if (facts.length === 0) return
    await this.ensureSchema()
    await this.pool.query(PG_PULL_REQUESTS.upsert, [PG_PULL_REQUESTS.batch(facts)])
  }

  async close(): Promise<void> {
    if (this.timer !== null) clearTimeout(this.timer)
    this.timer = null
    const deadline = Date.now() + CLOSE_PATIENCE_MS
    let flushed = await this.flush()
    // A stopped process does not wait for the database (pg-patience.ts).
    while (!flushed && Date.now() < deadline && !indexWaitsEnded()) {
      await indexSleep(Math.min(backoff(this.failures), deadline - Date.now()))
      flushed = await this.flush()
    }
    const left = this.queued()
    if (left > 0)
      this.warn(
        `${left} index write(s) not made in PostgreSQL (${this.lastError ?? 'unreachable'}); the task directories have them: run ctxagent reindex once it is back`,
      )
    await this.pool.end().catch(() => undefined)
  }

  /** Every queued write made, or the reason it could not be. */
  private async drain(): Promise<void> {
    if (this.queued() === 0 && this.flushing === null) return
    if (!(await this.flush())) throw new Error(`PostgreSQL index writes failed: ${this.lastError}`)
  }

  private schedule(delayMs: number): void {
    if (this.timer !== null || this.flushing !== null) return
    this.timer = setTimeout(() => {
      this.timer = null
      void this.flush().then((ok) => {
        if (!ok) this.schedule(backoff(this.failures))
      })
    }, delayMs)
    // close() waits for what is queued; a timer alone must not hold a finished command open.
    this.timer.unref()
  }

  /** One attempt at writing what is queued (joining one under way); true when nothing is left. */
  private async flush(): Promise<boolean> {
    while (this.flushing !== null) await this.flushing
    if (this.queued() === 0) return true
    const rows = this.pending
    const disk = this.pendingDisk
    const spend = this.pendingSpend
    const limits = this.pendingLimits
    this.pending = new Map()
    this.pendingDisk = new Map()
    this.pendingSpend = new Map()
    this.pendingLimits = new Map()
    this.flushing = this.write(rows, disk, spend, limits).then(
      () => {
        this.failures = 0
        return true
      },
      (err: unknown) => {
        this.failures++
        this.lastError = pgReason(err)
        // Put back what no newer write replaced meanwhile.
        for (const [uuid, row] of rows) if (!this.pending.has(uuid)) this.pending.set(uuid, row)
        for (const [uuid, use] of disk) if (!this.pendingDisk.has(uuid)) this.pendingDisk.set(uuid, use)
        // Spend is added, never replaced: what failed joins what came meanwhile.
        for (const [id, add] of spend) {
          const later = this.pendingSpend.get(id)
          this.pendingSpend.set(id, later ? { ...add, usd: add.usd + later.usd, requests: add.requests + later.requests } : add)
        }
        for (const [key, limit] of limits) if (!this.pendingLimits.has(key)) this.pendingLimits.set(key, limit)
        return false
      },
    )
    try {
      const ok = await this.flushing
      return ok && this.queued() === 0
    } finally {
      this.flushing = null
      if (this.queued() > 0) this.schedule(this.failures > 0 ? backoff(this.failures) : 0)
    }
  }

  /** Writes waiting to be made. */
  private queued(): number {
    return this.pending.size + this.pendingDisk.size + this.pendingSpend.size + this.pendingLimits.size
  }

  private async write(
    rows: Map<string, TaskRow | null>,
    disk: Map<string, DiskUse>,
    spend: Map<string, { user: string; day: string; usd: number; requests: number }> = new Map(),
    limits: Map<string, { key: string; provider: string; until: string }> = new Map(),
  ): Promise<void> {
    await this.ensureSchema()
    const upserts = [...rows.values()].filter((r): r is TaskRow => r !== null)
    const removals = [...rows].filter(([, r]) => r === null).map(([uuid]) => uuid)
    const uses = [...disk].map(([uuid, use]) => ({ uuid, bytes: use.bytes, raw: use.raw }))
    const statements: [string, unknown[]][] = []
    if (removals.length > 0) statements.push(['DELETE FROM tasks WHERE uuid = ANY($1::text[])', [removals]])
    if (upserts.length > 0) statements.push([UPSERT, [batch(upserts)]])
    if (uses.length > 0) {
      statements.push([
        `UPDATE tasks t SET disk_bytes = d.bytes, disk_bytes_raw = d.raw
         FROM jsonb_to_recordset($1::jsonb) AS d(uuid TEXT, bytes BIGINT, raw BIGINT) WHERE t.uuid = d.uuid`,
        [JSON.stringify(uses)],
      ])
    }
    if (spend.size > 0) statements.push([PG_SPEND.add, [JSON.stringify([...spend.values()])]])
    if (limits.size > 0) statements.push([PG_SPEND.setLimits, [JSON.stringify([...limits.values()])]])
    if (statements.length === 1) {
      const [sql, params] = statements[0] as [string, unknown[]]
      await this.pool.query(sql, params)
      return
    }
    await this.transaction(async (client) => {
      for (const [sql, params] of statements) await client.query(sql, params)
    })
  }

  private transaction(body: (client: PoolClient) => Promise<void>): Promise<void> {
    return inTransaction(this.pool, body)
  }
}

function decode(row: Record<string, unknown>): TaskRow {
  const out: Record<string, unknown> = {}
  for (const column of COLUMNS) {
    const value = row[column]
    out[column] = NUMERIC.has(column) && value !== null && value !== undefined ? Number(value) : (value ?? null)
  }
  return out as unknown as TaskRow
}

function backoff(failures: number): number {
  return Math.min(100 * 2 ** Math.max(0, failures - 1), 5_000)
}
