import type { DiskUse } from '../fs/disk.js'
import type { Location } from '../fs/layout.js'
import type { TaskRow } from '../index/task-index.js'
import type { TaskMetadata } from './metadata.js'
import { deliveryOf, deliveryResult } from './delivery.js'
import { environmentOf } from './environment-view.js'
import type { TaskState } from './state.js'
import type { TaskEnv } from './env.js'
import { legacyTally } from './tool-tally.js'
import { isCount } from './state-counts.js'

export interface TaskCounts {
  messages: number
  summaries: number
  tools: number
}

/** The row of a task, from its metadata, state and record counts. */
export function taskRow(meta: TaskMetadata, state: TaskState | null, location: Location, counts: TaskCounts, disk: DiskUse | null = null): TaskRow {
  const final = state !== null && (state.status === 'completed' || state.status === 'failed' || state.status === 'timeout')
  return {
    uuid: meta.uuid,
    status: state?.status ?? 'initializing',
    location,
    task_type: meta.task_type,
    task_identifier: meta.task_identifier || null,
    repository: meta.repository || null,
    user: meta.user,
    hostname: meta.hostname || null,
    created_at: meta.created_at || state?.started_at || '',
    started_at: state?.started_at ?? null,
    updated_at: state?.updated_at ?? null,
    completed_at: state?.completed_at ?? null,
    metadata: JSON.stringify(meta),
    total_messages: counts.messages,
    total_summaries: counts.summaries,
    total_tool_calls: counts.tools,
    // By tool and outcome (tool-tally.ts); a state.json without a tally has its calls all unknown.
    tool_calls: JSON.stringify(state?.tool_calls ?? legacyTally(counts.tools)),
    llm_call_count: count(state?.llm_call_count) ?? 0,
    total_tokens: count(state?.total_tokens_used) ?? 0,
    // An older state.json without the split: 0 each, all of total_tokens unsplit (as stats reads it).
    prompt_tokens: state === null ? null : (count(state.prompt_tokens) ?? 0),
    completion_tokens: state === null ? null : (count(state.completion_tokens) ?? 0),
    cached_tokens: state === null ? null : (count(state.cached_tokens) ?? 0),
    cache_write_tokens: state === null ? null : (count(state.cache_write_tokens) ?? 0),
    // The LLM requests that were not turns (turns are llm_call_count), by purpose.
    summary_calls: state === null ? null : (count(state.compaction_tokens?.requests) ?? 0),
    final_summary_calls: state === null ? null : (count(state.final_summary_tokens?.requests) ?? 0),
    // Their tokens, summed: billed as turns are (docs/running.md#budgets).
    ...summaryTokens(state),
    delivery_result: deliveryResultOf(state),
    ...environmentCounted(state),
    compression_count: count(state?.compression_count) ?? counts.summaries,
    // A paused task's too: the window its resume sends first, which the fleet's claim counts (storage/index/spend.ts claimNeedSql).
    final_token_count: final || state?.status === 'paused' ? count(state?.current_context_tokens) : null,
    final_message_count: final ? counts.messages : null,
    error_message: state?.error ?? null,
    disk_bytes: disk?.bytes ?? null,
    disk_bytes_raw: disk?.raw ?? null,
    ...pullRequestOf(meta, state),
  }
}

/**
 * The pull/merge request a task is on (docs/contract.md §17): the one its delivery opened or
 * pushed to, else the one whose head branch it worked on (a follow-up that delivered
 * nothing still spent on it); whether it opened it; the commit it pushed there.
 */
export function pullRequestOf(meta: TaskMetadata, state: TaskState | null): Pick<TaskRow, 'pr_url' | 'pr_opened' | 'delivery_commit'> {
  const delivery = deliveryOf(state)
  const run = meta.run
  const onHead = run?.deliver_target?.kind === 'pr-head' ? run.deliver_target.pr.url : (run?.pr_head?.url ?? null)
  const url = delivery?.pr?.url ?? onHead
  if (url === null) return { pr_url: null, pr_opened: null, delivery_commit: null }
  return {
    pr_url: url,
    pr_opened: delivery?.pr != null && onHead === null ? 1 : 0,
    delivery_commit: delivery?.pushed === true ? delivery.commit : null,
  }
}

/**
 * A counter as the index holds it: a whole number from 0 to 2^53 (SQLite's INTEGER and
 * PostgreSQL's bigint hold it; /metrics' counters never fall), else null. readState
 * made a state.json's counters so already (state-counts.ts); this is the last gate
 * before any index, whatever state it is given.
 */
function count(value: unknown): number | null {
  return isCount(value) ? value : null
}

/** Writes a task's row to the index; a failure is a warning (the directories stay the truth). */
export function indexTask(
  env: TaskEnv,
  meta: TaskMetadata,
  state: TaskState | null,
  location: Location,
  counts: TaskCounts,
  disk: DiskUse | null = null,
): void {
  if (env.index === null) return
  try {
    env.index.upsert(taskRow(meta, state, location, counts, disk))
  } catch (err) {
    env.warn(`tasks.db not updated for ${meta.uuid}: ${(err as Error).message} (run ctxagent reindex later)`)
  }
}

/** How the delivery ended, for the index's counters (ctxagent_deliveries_total): counted once the task is completed. */
function deliveryResultOf(state: TaskState | null): string | null {
  const d = deliveryOf(state)
  return d === null || state?.status !== 'completed' ? null : deliveryResult(d)
}

/**
 * What the index counts of the task's environment (ctxagent_env_cache_total, ctxagent_env_setup_seconds):
 * its cache result once prepared or failed (a stopped one counts nothing: its resume prepares again),
 * and the time of a setup that ran.
 */
function environmentCounted(state: TaskState | null): { env_cache: string | null; env_setup_ms: number | null } {
  const e = environmentOf(state)
  if (e === null || e.status === 'stopped' || e.cache === 'none') return { env_cache: null, env_setup_ms: null }
  return { env_cache: e.cache, env_setup_ms: e.setup_seconds === null ? null : Math.round(e.setup_seconds * 1000) }
}

/** The compactions' and final summary's tokens summed (null: no state to read them from); a figure that is no count is 0. */
function summaryTokens(state: TaskState | null): Pick<TaskRow, 'summary_prompt_tokens' | 'summary_completion_tokens' | 'summary_cached_tokens'> {
  if (state === null) return { summary_prompt_tokens: null, summary_completion_tokens: null, summary_cached_tokens: null }
  const sum = (key: 'prompt_tokens' | 'completion_tokens' | 'cached_tokens') =>
    (count(state.compaction_tokens?.[key]) ?? 0) + (count(state.final_summary_tokens?.[key]) ?? 0)
  return { summary_prompt_tokens: sum('prompt_tokens'), summary_completion_tokens: sum('completion_tokens'), summary_cached_tokens: sum('cached_tokens') }
}
