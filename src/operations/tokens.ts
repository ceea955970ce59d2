import type { Config } from '../config/schema.js'
import type { Layout, Location } from '../storage/fs/layout.js'
import type { TaskIndex } from '../storage/index/task-index.js'
import { readState } from '../storage/task/state.js'
import type { TaskState } from '../storage/task/state.js'
import type { RequestsUsage } from '../storage/format/records.js'

/** A task's tokens, split as the provider reported them (or as estimated where it did not). */
export interface TokenSplit {
  total: number
  prompt: number
  completion: number
  cached: number
  /** Prompt tokens written to the provider's cache (billed at pricing cache_write), where recorded. */
  cache_write?: number
}

export interface TokenReport extends TokenSplit {
  /** Tokens of tasks written before the split was recorded: in `total`, in neither prompt nor completion. */
  unsplit: number
  /** USD, from config `pricing`, over the tasks whose model has a price; null when none has. */
  cost_usd: number | null
  /** Tasks whose model has no price in config `pricing` (their tokens are not in cost_usd). */
  unpriced_tasks: number
}

/** The split of one task's state.json (an older file without it: all of it unsplit); cache writes only where recorded. */
export function splitOf(
  state: Pick<TaskState, 'total_tokens_used' | 'prompt_tokens' | 'completion_tokens' | 'cached_tokens' | 'cache_write_tokens'>,
): TokenSplit {
  return {
    total: state.total_tokens_used ?? 0,
    prompt: state.prompt_tokens ?? 0,
    completion: state.completion_tokens ?? 0,
    cached: state.cached_tokens ?? 0,
    ...(state.cache_write_tokens ? { cache_write: state.cache_write_tokens } : {}),
  }
}

/**
 * What a task cost, in USD, from `pricing.<model>` (per million tokens), as providers
 * bill it: prompt tokens served from the cache at `cached`, those written to it at
 * `cache_write`, the rest at `prompt` (a missing rate: the prompt price); or null when
 * the model has none.
 */
export function costOf(
  model: string | null | undefined,
  split: Pick<TokenSplit, 'prompt' | 'completion' | 'cached' | 'cache_write'>,
  pricing: Config['pricing'],
): number | null {
  const usd = unroundedCost(model, split, pricing)
  return usd === null ? null : roundUsd(usd)
}

/** The one rounding of a cost: to a millionth of a dollar (docs/running.md#budgets). */
export function roundUsd(usd: number): number {
  return Math.round(usd * 1e6) / 1e6
}

function unroundedCost(
  model: string | null | undefined,
  split: Pick<TokenSplit, 'prompt' | 'completion' | 'cached' | 'cache_write'>,
  pricing: Config['pricing'],
): number | null {
  if (!model || !Object.hasOwn(pricing, model)) return null
  const price = pricing[model] as Config['pricing'][string]
  const cached = Math.min(split.cached, split.prompt)
  const written = Math.min(split.cache_write ?? 0, split.prompt - cached)
  return (
    ((split.prompt - cached - written) * price.prompt +
      cached * (price.cached ?? price.prompt) +
      written * (price.cache_write ?? price.prompt) +
      split.completion * price.completion) /
    1_000_000
  )
}

/**
 * A task's bill (docs/running.md#budgets): its turns, its compactions' summaries and its final summary, all billed,
 * summed and rounded once; null when its model has no price. `stats`, `view`, `export` and the caps read this one figure.
 */
export function taskBill(
  model: string | null | undefined,
  state: Pick<
    TaskState,
    'total_tokens_used' | 'prompt_tokens' | 'completion_tokens' | 'cached_tokens' | 'cache_write_tokens' | 'compaction_tokens' | 'final_summary_tokens'
  >,
  pricing: Config['pricing'],
): number | null {
  return billFrom(model, splitOf(state), [state.compaction_tokens, state.final_summary_tokens], pricing)
}

/** The turns' split and the other requests' usage, priced and summed, rounded once: taskBill's figure from parts (an index row's, /metrics' counters). */
export function billFrom(
  model: string | null | undefined,
  turns: Pick<TokenSplit, 'prompt' | 'completion' | 'cached' | 'cache_write'>,
  others: (RequestsUsage | undefined)[],
  pricing: Config['pricing'],
): number | null {
  const usd = unroundedCost(model, turns, pricing)
  if (usd === null) return null
  const extra = others.reduce(
    (sum, u) => sum + (u ? (unroundedCost(model, { prompt: u.prompt_tokens, completion: u.completion_tokens, cached: u.cached_tokens }, pricing) ?? 0) : 0),
    0,
  )
  return roundUsd(usd + extra)
}

/**
 * Requests that are not turns (state.json final_summary_tokens, compaction_tokens), with
 * their cost at the task's prices; null when there were none.
 */
export function requestsCost(model: string | null | undefined, usage: RequestsUsage | undefined, pricing: Config['pricing']): RequestsCost | null {
  if (!usage) return null
  const split = { prompt: usage.prompt_tokens, completion: usage.completion_tokens, cached: usage.cached_tokens }
  return { requests: usage.requests, ...split, cost_usd: costOf(model, split, pricing) }
}

export interface RequestsCost {
  requests: number
  prompt: number
  completion: number
  cached: number
  cost_usd: number | null
}

/**
 * The token split and cost over the tasks that `whereSql` selects in the index: the split
 * from the row's columns, or, for a row indexed before they existed (or without a readable
 * state), from the task's state.json; the model from the row's metadata. A task whose
 * state cannot be read counts its indexed total as unsplit.
 */
export function collectTokens(index: TaskIndex, layout: Layout, where: { sql: string; params: unknown[] }, pricing: Config['pricing']): TokenReport {
  const rows = index.db
    .prepare(
      `SELECT uuid, location, metadata, total_tokens, prompt_tokens, completion_tokens, cached_tokens, cache_write_tokens, summary_calls, final_summary_calls FROM tasks ${where.sql}`,
    )
    .all(...where.params) as {
    uuid: string
    location: Location
    metadata: string | null
    total_tokens: number | null
    prompt_tokens: number | null
    completion_tokens: number | null
    cached_tokens: number | null
    cache_write_tokens: number | null
    summary_calls: number | null
    final_summary_calls: number | null
  }[]
  const report: TokenReport = { total: 0, prompt: 0, completion: 0, cached: 0, cache_write: 0, unsplit: 0, cost_usd: null, unpriced_tasks: 0 }
  for (const row of rows) {
    // Cache writes: 0 in a row indexed before their column (until a reindex).
    const split: TokenSplit =
      row.prompt_tokens !== null
        ? {
            total: row.total_tokens ?? 0,
            prompt: row.prompt_tokens,
            completion: row.completion_tokens ?? 0,
            cached: row.cached_tokens ?? 0,
            cache_write: row.cache_write_tokens ?? 0,
          }
        : splitFromState(layout, row)
    report.total += split.total
    report.prompt += split.prompt
    report.completion += split.completion
    report.cached += split.cached
    report.cache_write = (report.cache_write ?? 0) + (split.cache_write ?? 0)
    report.unsplit += Math.max(0, split.total - split.prompt - split.completion)
    const cost = billOf(layout, row, split, modelOf(row.metadata), pricing)
    if (cost === null) report.unpriced_tasks++
    else report.cost_usd = roundUsd((report.cost_usd ?? 0) + cost)
  }
  return report
}

/**
 * A listed task's bill (taskBill): the turns' split from its index row; the index keeps no summaries' tokens, so a
 * task whose row counts compactions or a final summary (summary_calls, final_summary_calls) reads theirs from its
 * state.json (one file read per such task). An unreadable state: its turns only.
 */
function billOf(
  layout: Layout,
  row: { uuid: string; location: Location; summary_calls: number | null; final_summary_calls: number | null },
  split: TokenSplit,
  model: string | null,
  pricing: Config['pricing'],
): number | null {
  let others: (RequestsUsage | undefined)[] = []
  if ((row.summary_calls ?? 0) > 0 || (row.final_summary_calls ?? 0) > 0) {
    try {
      const state = readState(layout.taskDir(row.location, row.uuid))
      if (state !== null) others = [state.compaction_tokens, state.final_summary_tokens]
    } catch {
      // Unreadable: the turns only, as the row has them.
    }
  }
  return billFrom(model, split, others, pricing)
}

export function splitFromState(layout: Layout, row: { uuid: string; location: Location; total_tokens: number | null }): TokenSplit {
  let state: TaskState | null = null
  try {
    state = readState(layout.taskDir(row.location, row.uuid))
  } catch {
    // Unreadable: its indexed total counts, unsplit.
  }
  return state ? splitOf(state) : { total: row.total_tokens ?? 0, prompt: 0, completion: 0, cached: 0 }
}

export function modelOf(metadata: string | null): string | null {
  if (metadata === null) return null
  try {
    const model = (JSON.parse(metadata) as { config?: { model?: unknown } }).config?.model
    return typeof model === 'string' ? model : null
  } catch {
    return null
  }
}
