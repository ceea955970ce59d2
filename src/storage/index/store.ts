import { LOCATIONS } from '../fs/layout.js'
import type { Layout, Location } from '../fs/layout.js'
import type { DiskUse } from '../fs/disk.js'
import { TaskIndex } from './task-index.js'
import type { TaskKeyColumns, TaskRow } from './task-index.js'
import { sqliteTotals } from './totals.js'
import { sqliteChoices, sqliteListPage } from './task-list.js'
import type { ListPage, TaskFilter } from './task-list.js'
import type { IndexTotals } from './totals.js'
import type { SpendRow, SpendTotals } from './spend.js'
import { sqliteSetFacts } from './pull-requests.js'
import type { PullRequestFacts } from './pull-requests.js'

export type FinishedRow = Pick<TaskRow, 'uuid' | 'location' | 'status' | 'completed_at'>

/**
 * The index of tasks, in tasks.db or in PostgreSQL (docs/contract.md §7, §14.1): one interface, two
 * implementations, chosen in one place (open.ts). Writes return at once, as the agent
 * loop needs (tasks.db writes them there and then; PostgreSQL queues them and flushes
 * in the background, with retries: the tree stays the truth and reindex repairs what a
 * long outage missed). Reads are asynchronous, and see every write made before them.
 */
export interface IndexStore {
  /** What the index is, for messages: `tasks.db` or `PostgreSQL`. */
  readonly name: string
  upsert(row: TaskRow): void
  remove(uuid: string): void
  /** Caches measured disk use of settled tasks. */
  setDiskUse(measured: readonly { uuid: string; disk: DiskUse }[]): void
  /** Replaces every row (reindex), in one transaction. */
  replaceAll(rows: readonly TaskRow[]): Promise<void>
  uuidsWithStatus(status: string): Promise<string[]>
  /** Finished tasks (completed or failed) with this task key, newest first: the candidates for inheritance. */
  finishedWithKey(key: TaskKeyColumns): Promise<FinishedRow[]>
  /** Rows per location (compared with directory listings to notice drift). */
  counts(): Promise<Record<Location, number>>
  /** Every row's uuid and location. */
  locations(): Promise<Map<string, Location>>
  get(uuid: string): Promise<TaskRow | undefined>
  /** The running totals /metrics reports (totals.ts): a few dozen rows however many tasks. */
  totals(): Promise<IndexTotals>
  /** One page of the task list, newest first, and how many match (task-list.ts). */
  listPage(filter: TaskFilter, offset: number, limit: number): Promise<ListPage>
  /** The users and statuses the index knows, for the list's filter form. */
  choices(): Promise<{ users: string[]; statuses: string[] }>
  /**
   * The rows as a tasks.db the reporting queries (stats) run on: tasks.db itself, or an
   * in-memory copy of PostgreSQL's whose disk-use cache writes go back to PostgreSQL.
   * Closed by the caller only when it is not the store's own (`owned` false).
   */
  reporting(): Promise<{ db: TaskIndex; owned: boolean }>
  /** Adds one paid LLM request's cost to a user's spend of a day (budgets.timezone's `YYYY-MM-DD`); returns at once (spend.ts). */
  addSpend(user: string, day: string, usd: number): void
  /** A user's spend on `day` and in its month, and every user's on `day`. */
  spendTotals(user: string, day: string): Promise<SpendTotals>
  /** Spend per user per day, `from` to `to` (day keys, inclusive). */
  spendByDay(from: string, to: string): Promise<SpendRow[]>
  /** Records that an API key (by its hash) is limited until `until` (ISO 8601); returns at once. */
  setKeyLimit(key: string, provider: string, until: string): void
  /** Until when an API key (by its hash) was last said to be limited (ISO 8601), or null. */
  keyLimit(key: string): Promise<string | null>
  /** Writes the forge's facts of pull/merge requests ctxagent opened, each replacing its earlier ones (pull-requests.ts). */
  setPullRequestFacts(facts: readonly PullRequestFacts[]): Promise<void>
  /** Waits until every queued write is made (or has failed for good); then closes. */
  close(): Promise<void>
}

/** tasks.db behind the interface: synchronous underneath, so nothing waits. */
export class SqliteStore implements IndexStore {
  readonly name = 'tasks.db'

  constructor(readonly db: TaskIndex) {}

  static open(path: string): SqliteStore {
    return new SqliteStore(TaskIndex.open(path))
  }

  upsert(row: TaskRow): void {
    this.db.upsert(row)
  }

  remove(uuid: string): void {
    this.db.remove(uuid)
  }

  setDiskUse(measured: readonly { uuid: string; disk: DiskUse }[]): void {
    this.db.setDiskUse(measured)
  }

  async replaceAll(rows: readonly TaskRow[]): Promise<void> {
    this.db.replaceAll(rows)
  }

  async uuidsWithStatus(status: string): Promise<string[]> {
    return this.db.uuidsWithStatus(status)
  }

  async finishedWithKey(key: TaskKeyColumns): Promise<FinishedRow[]> {
    return this.db.finishedWithKey(key)
  }

  async counts(): Promise<Record<Location, number>> {
    return Object.fromEntries(LOCATIONS.map((l) => [l, this.db.countAt(l)])) as Record<Location, number>
  }

  async locations(): Promise<Map<string, Location>> {
    return this.db.locations()
  }

  async get(uuid: string): Promise<TaskRow | undefined> {
    return this.db.get(uuid)
  }

  async totals(): Promise<IndexTotals> {
    return sqliteTotals(this.db.db)
  }

  async listPage(filter: TaskFilter, offset: number, limit: number): Promise<ListPage> {
    return sqliteListPage(this.db.db, filter, offset, limit)
  }

  async choices(): Promise<{ users: string[]; statuses: string[] }> {
    return sqliteChoices(this.db.db)
  }

  async reporting(): Promise<{ db: TaskIndex; owned: boolean }> {
    return { db: this.db, owned: true }
  }

  addSpend(user: string, day: string, usd: number): void {
    this.db.spend.add(user, day, usd)
  }

  async spendTotals(user: string, day: string): Promise<SpendTotals> {
    return this.db.spend.totals(user, day)
  }

  async spendByDay(from: string, to: string): Promise<SpendRow[]> {
    return this.db.spend.byDay(from, to)
  }

  setKeyLimit(key: string, provider: string, until: string): void {
    this.db.spend.setLimit(key, provider, until, new Date().toISOString())
  }

  async keyLimit(key: string): Promise<string | null> {
    return this.db.spend.limit(key)
  }

  async setPullRequestFacts(facts: readonly PullRequestFacts[]): Promise<void> {
    sqliteSetFacts(this.db.db, facts)
  }

  async close(): Promise<void> {
    this.db.close()
  }
}

export interface Drift {
  location: Location
  indexed: number
  found: number
}

/**
 * Where the index disagrees with the directories: each location's row count against a
 * listing of it. Listings are cheap; reading every task is not. Empty when they agree.
 */
export async function indexDrift(index: IndexStore, layout: Layout, locations: readonly Location[] = LOCATIONS): Promise<Drift[]> {
  const counts = await index.counts()
  return locations.map((location) => ({ location, indexed: counts[location], found: layout.list(location).length })).filter((d) => d.indexed !== d.found)
}
