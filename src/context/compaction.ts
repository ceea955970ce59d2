import type { Config } from '../config/schema.js'
import type { StoredMessage, SummaryRecord, WindowMessage } from '../storage/format/records.js'
import { estimateTokens, windowTokens } from '../storage/format/tokens.js'
import { windowOf } from './snapshot.js'
import type { ContextSnapshot } from './snapshot.js'
import { noUsage } from './summarizer.js'
import type { Summarizer } from './summarizer.js'

export interface CompactionSettings {
  keepRecent: number
  minToCompress: number
}

export interface CompactionPlan {
  snapshot: ContextSnapshot
  /** Oldest messages, to be summarized (after the previous summary, if any). */
  summarize: StoredMessage[]
  /** The most recent messages, kept verbatim. */
  keep: StoredMessage[]
  tokensBefore: number
}

export function settingsFrom(config: Config, keepRecent?: number): CompactionSettings {
  return { keepRecent: keepRecent ?? config.context.compression.keep_recent, minToCompress: config.context.compression.min_to_compress }
}

/** The token limit above which a window is compressed: token_threshold if set, else context_length × threshold. */
export function compressionLimit(config: Config, contextLength: number): number {
  const c = config.context.compression
  return c.token_threshold ?? Math.floor(contextLength * c.threshold)
}

/**
 * Should the window be compressed? Over the limit (by the provider's reported
 * prompt_tokens when known, else the estimate) and with enough to summarize.
 */
export function shouldCompress(plan: CompactionPlan | null, limit: number, reportedPromptTokens?: number | null): plan is CompactionPlan {
  if (plan === null) return false
  return (reportedPromptTokens ?? plan.tokensBefore) > limit
}

/**
 * Where to split (docs/contract.md §5): keep the last `keepRecent` messages, moving the split
 * back so that no tool result is separated from the assistant message that asked
 * for it, and, where that still leaves `minToCompress` to summarize, back to a user
 * turn. Null when there is not enough to summarize.
 */
export function planCompaction(snapshot: ContextSnapshot, settings: CompactionSettings): CompactionPlan | null {
  const candidates = snapshot.after.filter((m) => m.seq !== snapshot.system?.seq)
  let split = candidates.length - settings.keepRecent
  if (split < settings.minToCompress) return null
  while (split > 0 && candidates[split]?.role === 'tool') split--
  let userTurn = split
  while (userTurn > 0 && candidates[userTurn]?.role !== 'user') userTurn--
  if (candidates[userTurn]?.role === 'user' && userTurn >= settings.minToCompress) split = userTurn
  if (split < settings.minToCompress) return null
  return {
    snapshot,
    summarize: candidates.slice(0, split),
    keep: candidates.slice(split),
    tokensBefore: windowTokens(windowOf(snapshot)),
  }
}

/** Where a compaction writes: a task's owner (TaskHandle) or the compress command. */
export interface CompactionSink {
  addSummary(record: Omit<SummaryRecord, 'summary_id'>): SummaryRecord
  replaceCurrent(window: readonly WindowMessage[]): void
}

export interface CompactionResult {
  record: SummaryRecord
  window: WindowMessage[]
  tokensBefore: number
  tokensAfter: number
}

/**
 * Summarizes the plan's old messages (folding in the previous summary), appends the
 * record to summaries.jsonl, then rewrites current.jsonl. Best effort: when the
 * summarizer fails, it throws before anything is written.
 */
export async function compact(plan: CompactionPlan, summarizer: Summarizer, sink: CompactionSink, now: Date): Promise<CompactionResult> {
  const previous = plan.snapshot.summary
  const usage = noUsage()
  const text = await summarizer.summarize(previous?.summary ?? null, plan.summarize, plan.snapshot.task, usage)
  const original = (previous?.summary_tokens ?? 0) + plan.summarize.reduce((sum, m) => sum + m.token_count, 0)
  const summaryTokens = estimateTokens(text)
  const record = sink.addSummary({
    start_seq: (plan.summarize[0] as StoredMessage).seq,
    end_seq: (plan.summarize.at(-1) as StoredMessage).seq,
    summary: text,
    created_at: now.toISOString(),
    original_tokens: original,
    summary_tokens: summaryTokens,
    compression_ratio: original > 0 ? Math.round((summaryTokens / original) * 10_000) / 10_000 : 0,
    compressed_message_count: plan.summarize.length,
    tokens_saved: Math.max(0, original - summaryTokens),
    method: summarizer.method,
    model: summarizer.model,
    ...(usage.requests > 0 ? { usage } : {}),
  })
  const window = windowOf({ ...plan.snapshot, summary: record, after: plan.keep })
  sink.replaceCurrent(window)
  return { record, window, tokensBefore: plan.tokensBefore, tokensAfter: windowTokens(window) }
}
