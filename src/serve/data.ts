import type { CommandEnv } from '../command-env.js'
import { diedState } from '../storage/task/state.js'
import { openIndex } from '../command-env.js'
import { taskStatement } from '../operations/list.js'
import type { ListedTask } from '../operations/list.js'
import { scanIntoMemory } from '../operations/stats.js'
import { costOf, modelOf, taskBill } from '../operations/tokens.js'
import type { TokenSplit } from '../operations/tokens.js'
import { readLock } from '../storage/lock/record.js'
import { indexDrift } from '../storage/index/store.js'
import type { IndexStore } from '../storage/index/store.js'
import type { TaskIndex } from '../storage/index/task-index.js'
import { sqliteTotals } from '../storage/index/totals.js'
import type { IndexTotals } from '../storage/index/totals.js'
import { sqliteChoices, sqliteListPage } from '../storage/index/task-list.js'
import type { ListPage, ListRow, TaskFilter } from '../storage/index/task-list.js'
import { deliveryOf } from '../storage/task/delivery.js'
import type { Delivery } from '../storage/task/state.js'
import { readState } from '../storage/task/state.js'

/** How long a copy of the rows is reused where making one is costly (PostgreSQL's, or a scan without an index). */
const COPY_MS = { PostgreSQL: 2_000, scan: 15_000 } as const

/**
 * The rows every page and scrape reads: tasks.db itself (opened once, read at each
 * request), a copy of PostgreSQL's index refreshed at most every 2 s, or, with no index
 * at all, a scan of the tree kept 15 s (with a warning to run reindex). Never a scan
 * per request.
 */
export class IndexSource {
  private copy: { db: TaskIndex; at: number } | null = null

  private constructor(
    private readonly ctx: CommandEnv,
    readonly store: IndexStore | null,
  ) {}

  static async open(ctx: CommandEnv): Promise<IndexSource> {
    const store = await openIndex(ctx, false)
    if (store === null)
      ctx.io.warn(
        `no tasks.db under ${ctx.layout.base}: serving from a scan of the directories, refreshed every ${COPY_MS.scan / 1000}s (run ctxagent reindex to make this fast)`,
      )
    else {
      const drift = await indexDrift(store, ctx.layout)
      if (drift.length > 0)
        ctx.io.warn(
          `${store.name} is out of date (${drift.map((d) => `${d.location}/ has ${d.found}, the index ${d.indexed}`).join('; ')}): run ctxagent reindex`,
        )
    }
    return new IndexSource(ctx, store)
  }

  /** Where the figures come from, as `stats --json` names it. */
  get kind(): 'tasks.db' | 'postgresql' | 'scan' {
    return this.store === null ? 'scan' : this.store.name === 'PostgreSQL' ? 'postgresql' : 'tasks.db'
  }

  /** One page of the task list: from the index itself, never a copy (a scan's copy when there is no index). */
  async listPage(filter: TaskFilter, offset: number, limit: number): Promise<ListPage> {
    return this.store !== null ? this.store.listPage(filter, offset, limit) : sqliteListPage((await this.rows()).db, filter, offset, limit)
  }

  async choices(): Promise<{ users: string[]; statuses: string[] }> {
    return this.store !== null ? this.store.choices() : sqliteChoices((await this.rows()).db)
  }

  /** The index's running totals (for /metrics): read from the index itself, never a copy. */
  async totals(): Promise<IndexTotals> {
    return this.store !== null ? this.store.totals() : sqliteTotals((await this.rows()).db)
  }

  async rows(): Promise<TaskIndex> {
    if (this.store !== null && this.store.name !== 'PostgreSQL') return (await this.store.reporting()).db
    const ttl = this.store === null ? COPY_MS.scan : COPY_MS.PostgreSQL
    const now = Date.now()
    if (this.copy !== null && now - this.copy.at < ttl) return this.copy.db
    const db = this.store === null ? (await scanIntoMemory(this.ctx.layout)).index : (await this.store.reporting()).db
    this.copy?.db.close()
    this.copy = { db, at: now }
    return db
  }

  async close(): Promise<void> {
    this.copy?.db.close()
    this.copy = null
    await this.store?.close()
  }
}

export type { TaskFilter } from '../storage/index/task-list.js'

export interface TaskRowView extends ListedTask {
  tokens_split: TokenSplit
  cost_usd: number | null
  /** The lock's host for a running task (its owner), else the host that made the task. */
  host: string | null
  completed_at: string | null
}

export interface TaskPage {
  tasks: TaskRowView[]
  total: number
  offset: number
  limit: number
}

/**
 * One page of tasks, newest first, from the index (task-list.ts: indexed queries, the
 * count from the totals: as fast with 100,000 tasks as with 10, in tasks.db or
 * PostgreSQL); each shown task's first statement line, final answer and owner are read
 * from its own files (a page's worth, never the tree).
 */
export async function taskPage(ctx: CommandEnv, index: IndexSource, filter: TaskFilter, offset: number, limit: number): Promise<TaskPage> {
  const { rows, total } = await index.listPage(filter, offset, limit)
  const tasks = await Promise.all(rows.map((row) => rowView(ctx, row)))
  return { tasks, total, offset, limit }
}

async function rowView(ctx: CommandEnv, row: ListRow): Promise<TaskRowView> {
  const dir = ctx.layout.taskDir(row.location, row.uuid)
  const meta = parseMeta(row.metadata)
  const model = modelOf(row.metadata)
  let statement = ''
  let answer: string | null = null
  let delivery: Delivery | null = null
  let turns = row.llm_call_count ?? 0
  let died = false
  let bill: number | null | undefined
  try {
    statement = await taskStatement(dir)
    const state = readState(dir)
    answer = state?.final_answer ?? null
    delivery = deliveryOf(state)
    turns = state?.turns ?? turns
    died = diedState(state)
    // The task's bill as stats, view and export give it (docs/running.md#budgets): turns, compactions, final summary.
    if (state !== null) bill = taskBill(model, state, ctx.config.pricing)
  } catch {
    // Moved or removed since the index was read: the row's own figures stand.
  }
  const split = {
    total: row.total_tokens ?? 0,
    prompt: row.prompt_tokens ?? 0,
    completion: row.completion_tokens ?? 0,
    cached: row.cached_tokens ?? 0,
    // As splitOf gives it: only where the task wrote to the cache.
    ...(row.cache_write_tokens ? { cache_write: row.cache_write_tokens } : {}),
  }
  const lockHost = row.location === 'running' ? (readLockQuietly(dir)?.hostname ?? null) : null
  return {
    uuid: row.uuid,
    status: row.status,
    location: row.location,
    created_at: row.created_at,
    user: row.user,
    model,
    provider: typeof meta.config?.llm_provider === 'string' && meta.config.llm_provider !== '' ? meta.config.llm_provider : null,
    workspace: typeof meta.run?.workspace === 'string' ? meta.run.workspace : null,
    turns,
    tokens: split.total,
    task: statement.trim().split('\n')[0]?.trim() ?? '',
    final_answer: answer,
    delivery,
    died,
    tokens_split: split,
    cost_usd: bill !== undefined ? bill : costOf(model, split, ctx.config.pricing),
    host: lockHost ?? row.hostname,
    completed_at: row.completed_at,
  }
}

/** The CLI's `list --json` row, without the page's extra fields. */
export function listedTask(t: TaskRowView): ListedTask {
  const { tokens_split: _split, cost_usd: _cost, host: _host, completed_at: _completed, ...listed } = t
  return listed
}

function parseMeta(text: string | null): { config?: { llm_provider?: unknown }; run?: { workspace?: unknown } } {
  try {
    return text === null ? {} : (JSON.parse(text) as { config?: { llm_provider?: unknown }; run?: { workspace?: unknown } })
  } catch {
    return {}
  }
}

function readLockQuietly(dir: string): { hostname: string } | null {
  try {
    return readLock(dir)?.info ?? null
  } catch {
    return null
  }
}
