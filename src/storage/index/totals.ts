import type { Database as Db } from 'better-sqlite3'
import type { Location } from '../fs/layout.js'
import { COUNTER_COLUMNS } from './counter-eras.js'
import type { CounterColumn } from './counter-eras.js'
import { envCounterValues } from './env-totals.js'
import type { EnvCounter } from './env-totals.js'

/**
 * Running totals of the index, kept by triggers on `tasks` in the index itself (tasks.db
 * and PostgreSQL alike), so that /metrics reads a few dozen rows, not 100,000:
 *
 * - `task_totals`: live tasks by location, status, user and model, with their cached disk
 *   use. A deleted row leaves it (these are gauges).
 * - `task_counters`: tokens, calls, compactions… by user and model; `task_durations`:
 *   finished tasks' durations by histogram bucket. A deleted row (cleanup) leaves its
 *   figures here: counters are the live sums plus what deleted tasks had, so they never
 *   fall. A rebuild (reindex) keeps that retired part and recomputes the live part.
 * - `task_tool_calls`: tool calls by tool and outcome, from each row's `tool_calls` JSON
 *   (a row without one: its total_tool_calls as unknown); retired as the counters are.
 */

/** Upper bounds (seconds) of the task duration histogram's buckets: half a minute to a day. */
export const DURATION_BUCKETS = [30, 60, 120, 300, 600, 1800, 3600, 7200, 21_600, 86_400] as const

export interface TotalsRow {
  location: Location
  status: string
  user: string
  model: string
  tasks: number
  disk_bytes: number
  disk_raw: number
  /** Tasks here whose disk use is not cached yet (reindexed, never measured). */
  unmeasured: number
}

interface BaseCounterRow {
  user: string
  model: string
  prompt: number
  cached: number
  completion: number
  tokens: number
  compactions: number
  llm_calls: number
  tool_calls: number
  messages: number
  /** Tasks whose dead agent was reaped (their error says so). */
  reaped: number
  /** Prompt tokens written to the provider's cache (in `prompt`, apart from `cached`); 0 for rows written before the column. */
  cache_write: number
  /** LLM requests that were not turns: compactions' summaries, final summaries (state.json's *_tokens.requests). */
  summary_calls: number
  final_summary_calls: number
  /** Deliveries by how they ended (storage/task/delivery.ts deliveryResult): 0 for rows written before the column. */
  deliveries_delivered: number
  deliveries_no_changes: number
  deliveries_refused: number
  deliveries_failed: number
  /** The tokens of the requests that were not turns (compactions' and final summaries'), billed as turns are; 0 for rows written before the columns. */
  summary_prompt: number
  summary_completion: number
  summary_cached: number
}

/** A counters row as read: the environments' counters too (env-totals.ts). */
export type CounterRow = BaseCounterRow & Record<EnvCounter, number>

export interface ToolCallsRow {
  tool: string
  outcome: string
  n: number
}

export interface DurationRow {
  /** Index into DURATION_BUCKETS; DURATION_BUCKETS.length: above the last. */
  bucket: number
  n: number
  total_ms: number
}

/** Tasks not yet in completed/: measured live and checked for long runs. */
export interface LiveRow {
  uuid: string
  location: Location
  started_at: string | null
  created_at: string
}

export interface IndexTotals {
  tasks: TotalsRow[]
  counters: CounterRow[]
  durations: DurationRow[]
  tools: ToolCallsRow[]
  live: LiveRow[]
}

/** One SQL dialect's spelling of what the totals need. */
export interface Dialect {
  user: string
  model: (row: string) => string
  /** A task's duration in seconds, or NULL. */
  seconds: (row: string) => string
  /** A row's tool calls as (tool, outcome, n) rows: a FROM item after the row's table, and what to select. */
  toolCalls: (row: string) => { from: string; tool: string; outcome: string; n: string; where: string }
}

export const SQLITE: Dialect = {
  user: 'user',
  model: (r) => `COALESCE(json_extract(${r}metadata, '$.config.model'), '')`,
  seconds: (r) => `((julianday(${r}completed_at) - julianday(COALESCE(${r}started_at, ${r}created_at))) * 86400.0)`,
  toolCalls: (r) => {
    const doc = `CASE WHEN ${r}tool_calls IS NULL THEN json_object('unknown', json_object('unknown', COALESCE(${r}total_tool_calls, 0)))
      WHEN json_valid(${r}tool_calls) AND json_type(${r}tool_calls) = 'object' THEN ${r}tool_calls ELSE '{}' END`
    return {
      from: `json_each(${doc}) AS tc, json_each(CASE WHEN tc.type = 'object' THEN tc.value ELSE '{}' END) AS oc`,
      tool: 'tc.key',
      outcome: 'oc.key',
      n: 'oc.value',
      where: `oc.type = 'integer' AND oc.value <> 0`,
    }
  },
}

/** Each counter's value for one row (`r` is `NEW.`, `OLD.` or '' for the table itself); a NULL (a row written before its column) is 0. */
function counterValues(_d: Dialect, r: string, columns: readonly CounterColumn[]): string[] {
  const value: Record<CounterColumn, string> = {
    prompt: `COALESCE(${r}prompt_tokens, 0)`,
    cached: `COALESCE(${r}cached_tokens, 0)`,
    completion: `COALESCE(${r}completion_tokens, 0)`,
    tokens: `COALESCE(${r}total_tokens, 0)`,
    compactions: `COALESCE(${r}compression_count, 0)`,
    llm_calls: `COALESCE(${r}llm_call_count, 0)`,
    tool_calls: `COALESCE(${r}total_tool_calls, 0)`,
    messages: `COALESCE(${r}total_messages, 0)`,
    reaped: `CASE WHEN ${r}error_message LIKE 'agent died%' OR ${r}error_message LIKE 'taken over%' THEN 1 ELSE 0 END`,
    cache_write: `COALESCE(${r}cache_write_tokens, 0)`,
    summary_calls: `COALESCE(${r}summary_calls, 0)`,
    final_summary_calls: `COALESCE(${r}final_summary_calls, 0)`,
    deliveries_delivered: `CASE WHEN ${r}delivery_result = 'delivered' THEN 1 ELSE 0 END`,
    deliveries_no_changes: `CASE WHEN ${r}delivery_result = 'no_changes' THEN 1 ELSE 0 END`,
    deliveries_refused: `CASE WHEN ${r}delivery_result = 'refused' THEN 1 ELSE 0 END`,
    deliveries_failed: `CASE WHEN ${r}delivery_result = 'failed' THEN 1 ELSE 0 END`,
    ...envCounterValues(r),
    summary_prompt: `COALESCE(${r}summary_prompt_tokens, 0)`,
    summary_completion: `COALESCE(${r}summary_completion_tokens, 0)`,
    summary_cached: `COALESCE(${r}summary_cached_tokens, 0)`,
  }
  return columns.map((c) => value[c])
}

function bucketOf(d: Dialect, r: string): string {
  return `CASE ${DURATION_BUCKETS.map((le, i) => `WHEN ${d.seconds(r)} <= ${le} THEN ${i}`).join(' ')} ELSE ${DURATION_BUCKETS.length} END`
}

const u = (d: Dialect): string => d.user

/** Adds (sign 1) or takes away (-1) one row's part of each table (`columns`: the counters the schema has then). */
export function applyRow(
  d: Dialect,
  r: 'NEW.' | 'OLD.',
  sign: 1 | -1,
  tables: ('tasks' | 'counters' | 'durations' | 'tools')[],
  columns: readonly CounterColumn[] = COUNTER_COLUMNS,
): string[] {
  const s = sign === 1 ? '' : '-'
  const out: string[] = []
  if (tables.includes('tasks')) {
    out.push(`INSERT INTO task_totals (location, status, ${u(d)}, model, tasks, disk_bytes, disk_raw, unmeasured)
      VALUES (${r}location, ${r}status, COALESCE(${r}${u(d)}, ''), ${d.model(r)}, ${s}1, ${s}COALESCE(${r}disk_bytes, 0), ${s}COALESCE(${r}disk_bytes_raw, 0), ${s}(CASE WHEN ${r}disk_bytes IS NULL THEN 1 ELSE 0 END))
      ON CONFLICT (location, status, ${u(d)}, model) DO UPDATE SET tasks = task_totals.tasks + excluded.tasks, disk_bytes = task_totals.disk_bytes + excluded.disk_bytes,
        disk_raw = task_totals.disk_raw + excluded.disk_raw, unmeasured = task_totals.unmeasured + excluded.unmeasured`)
  }
  if (tables.includes('counters')) {
    out.push(`INSERT INTO task_counters (${u(d)}, model, ${columns.join(', ')})
      VALUES (COALESCE(${r}${u(d)}, ''), ${d.model(r)}, ${counterValues(d, r, columns)
        .map((v) => `${s}${v}`)
        .join(', ')})
      ON CONFLICT (${u(d)}, model) DO UPDATE SET ${columns.map((c) => `${c} = task_counters.${c} + excluded.${c}`).join(', ')}`)
  }
  if (tables.includes('durations')) {
    out.push(`INSERT INTO task_durations (bucket, n, total_ms)
      SELECT ${bucketOf(d, r)}, ${s}1, ${s}ROUND(${d.seconds(r)} * 1000) WHERE ${r}completed_at IS NOT NULL AND ${d.seconds(r)} >= 0
      ON CONFLICT (bucket) DO UPDATE SET n = task_durations.n + excluded.n, total_ms = task_durations.total_ms + excluded.total_ms`)
  }
  if (tables.includes('tools')) {
    const t = d.toolCalls(r)
    out.push(`INSERT INTO task_tool_calls (tool, outcome, n)
      SELECT ${t.tool}, ${t.outcome}, ${s}${t.n} FROM ${t.from} WHERE ${t.where}
      ON CONFLICT (tool, outcome) DO UPDATE SET n = task_tool_calls.n + excluded.n`)
  }
  return out
}

/** The live part of each table, from `tasks` itself: SELECTs whose columns are named as the table's. */
export function liveSums(
  d: Dialect,
  columns: readonly CounterColumn[] = COUNTER_COLUMNS,
): { tasks: string; counters: string; durations: string; tools: string } {
  const model = d.model('')
  const t = d.toolCalls('tasks.')
  return {
    tasks: `SELECT location, status, COALESCE(${u(d)}, '') AS ${u(d)}, ${model} AS model, COUNT(*) AS tasks, COALESCE(SUM(disk_bytes), 0) AS disk_bytes,
      COALESCE(SUM(disk_bytes_raw), 0) AS disk_raw, SUM(CASE WHEN disk_bytes IS NULL THEN 1 ELSE 0 END) AS unmeasured
      FROM tasks WHERE true GROUP BY 1, 2, 3, 4`,
    counters: `SELECT COALESCE(${u(d)}, '') AS ${u(d)}, ${model} AS model, ${counterValues(d, '', columns)
      .map((v, i) => `SUM(${v}) AS ${columns[i]}`)
      .join(', ')}
      FROM tasks WHERE true GROUP BY 1, 2`,
    durations: `SELECT ${bucketOf(d, '')} AS bucket, COUNT(*) AS n, SUM(ROUND(${d.seconds('')} * 1000)) AS total_ms
      FROM tasks WHERE completed_at IS NOT NULL AND ${d.seconds('')} >= 0 GROUP BY 1`,
    tools: `SELECT ${t.tool} AS tool, ${t.outcome} AS outcome, SUM(${t.n}) AS n FROM tasks, ${t.from} WHERE ${t.where} GROUP BY 1, 2`,
  }
}

/** tasks.db's triggers: one statement list per event, counting `columns`. */
export function sqliteTriggers(columns: readonly CounterColumn[] = COUNTER_COLUMNS): string {
  const d = SQLITE
  const body = (statements: string[]) => statements.map((x) => `${x};`).join('\n')
  const prune = 'DELETE FROM task_totals WHERE tasks = 0;'
  return `
  CREATE TRIGGER tasks_totals_insert AFTER INSERT ON tasks BEGIN
    ${body(applyRow(d, 'NEW.', 1, ['tasks', 'counters', 'durations'], columns))}
  END;
  CREATE TRIGGER tasks_totals_update AFTER UPDATE ON tasks BEGIN
    ${body([...applyRow(d, 'OLD.', -1, ['tasks', 'counters', 'durations'], columns), ...applyRow(d, 'NEW.', 1, ['tasks', 'counters', 'durations'], columns)])}
    ${prune}
  END;
  CREATE TRIGGER tasks_totals_delete AFTER DELETE ON tasks BEGIN
    ${body(applyRow(d, 'OLD.', -1, ['tasks']))}
    ${prune}
  END;`
}

/**
 * Around a rebuild of `tasks` (reindex): `before` turns the counters into their retired
 * part alone (what deleted tasks left: the counters less the live sums) and the live
 * tables into nothing; `after` adds the new rows' sums. Neither counts twice nor loses.
 */
export function rebuildStatements(d: Dialect): { before: string[]; after: string[] } {
  const live = liveSums(d)
  const shape = {
    counters: { keys: [u(d), 'model'], values: [...COUNTER_COLUMNS] },
    durations: { keys: ['bucket'], values: ['n', 'total_ms'] },
    tool_calls: { keys: ['tool', 'outcome'], values: ['n'] },
  }
  const merge = (table: 'counters' | 'durations' | 'tool_calls', sign: '' | '-') => {
    const { keys, values } = shape[table]
    return `INSERT INTO task_${table} (${[...keys, ...values].join(', ')})
      SELECT ${[...keys, ...values.map((v) => `${sign}${v}`)].join(', ')} FROM (${live[table === 'tool_calls' ? 'tools' : table]}) AS live WHERE true
      ON CONFLICT (${keys.join(', ')}) DO UPDATE SET ${values.map((v) => `${v} = task_${table}.${v} + excluded.${v}`).join(', ')}`
  }
  return {
    before: [merge('counters', '-'), merge('durations', '-'), merge('tool_calls', '-'), 'DELETE FROM task_totals'],
    after: [`INSERT INTO task_totals ${live.tasks}`, merge('counters', ''), merge('durations', ''), merge('tool_calls', '')],
  }
}

/** Tool calls by tool and outcome, as /metrics reads them. */
export const TOOL_CALLS = 'SELECT tool, outcome, n FROM task_tool_calls WHERE n > 0 ORDER BY tool, outcome'

/** Tasks in running/ and paused/ (by the location index: few of many). */
export const LIVE_ROWS = `SELECT uuid, location, started_at, created_at FROM tasks WHERE location IN ('running', 'paused')`

/** The totals as /metrics reads them, from tasks.db. */
export function sqliteTotals(db: Db): IndexTotals {
  return {
    tasks: db.prepare('SELECT * FROM task_totals WHERE tasks > 0').all() as TotalsRow[],
    counters: db.prepare('SELECT * FROM task_counters').all() as CounterRow[],
    durations: db.prepare('SELECT * FROM task_durations ORDER BY bucket').all() as DurationRow[],
    tools: db.prepare(TOOL_CALLS).all() as ToolCallsRow[],
    live: db.prepare(LIVE_ROWS).all() as LiveRow[],
  }
}
