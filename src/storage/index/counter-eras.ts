import { ENV_COUNTERS } from './env-totals.js'

/*
 * The index's counters by era (docs/formats.md): each migration's triggers count only the
 * counters that existed when it ran, so an era's list is kept apart and never changed.
 */

/** The counters the totals' first migration made: what its triggers (and an older ctxagent's) count. */
export const FIRST_COUNTERS = ['prompt', 'cached', 'completion', 'tokens', 'compactions', 'llm_calls', 'tool_calls', 'messages', 'reaped'] as const

/**
 * The columns of cache writes and of the requests that were not turns (compactions' and final
 * summaries'): in `tasks` (NULL in rows written before: 0 in every sum, until a reindex fills
 * them from state.json) and as counters (starting at 0: what deleted tasks had of them is not known).
 */
export const LATER_TASK_COLUMNS = ['cache_write_tokens', 'summary_calls', 'final_summary_calls'] as const
export const LATER_COUNTERS = ['cache_write', 'summary_calls', 'final_summary_calls'] as const

/** The counters after sqliteCountersMigration (its triggers count these; the deliveries came later). */
export const SECOND_COUNTERS = [...FIRST_COUNTERS, ...LATER_COUNTERS] as const
/** Deliveries by result (docs/delivery.md#what-is-recorded): the row's column and the counters. */
export const DELIVERY_COUNTERS = ['deliveries_delivered', 'deliveries_no_changes', 'deliveries_refused', 'deliveries_failed'] as const

/** The counters after sqliteDeliveriesMigration (the environments' came later). */
export const DELIVERED_COUNTERS = [...SECOND_COUNTERS, ...DELIVERY_COUNTERS] as const

/** The counters after sqliteEnvMigration (the summaries' tokens came later). */
export const ENVIRONED_COUNTERS = [...DELIVERED_COUNTERS, ...ENV_COUNTERS] as const
/**
 * The tokens of the requests that were not turns (compactions' and final summaries', state.json's compaction_tokens and
 * final_summary_tokens summed): billed as turns are (docs/running.md#budgets), so /metrics' cost is the bill stats gives.
 */
export const SUMMARY_TASK_COLUMNS = ['summary_prompt_tokens', 'summary_completion_tokens', 'summary_cached_tokens'] as const
export const SUMMARY_COUNTERS = ['summary_prompt', 'summary_completion', 'summary_cached'] as const

/** Every counter: each era's, in the order the migrations added them (sqlite-totals-migrations.ts, pg-totals.ts). */
export const COUNTER_COLUMNS = [...ENVIRONED_COUNTERS, ...SUMMARY_COUNTERS] as const
export type CounterColumn = (typeof COUNTER_COLUMNS)[number]
