import type { LlmClient } from '../llm/client.js'
import { FINAL_SUMMARY_SYSTEM_PROMPT, SUMMARY_SYSTEM_PROMPT } from '../llm/prompts.js'
import { ProviderError } from '../errors.js'
import type { RequestsUsage, StoredMessage } from '../storage/format/records.js'
import { estimateTokens } from '../storage/format/tokens.js'
import { extractiveSummary } from './extractive.js'
import { transcriptLine } from './transcript.js'

/** Turns earlier context (and the summary before it) into a new summary. */
export interface Summarizer {
  readonly method: 'llm' | 'extractive'
  readonly model: string | null
  /** `usage`, when given, gets the summary's LLM requests added to it. */
  summarize(previous: string | null, messages: readonly StoredMessage[], task: StoredMessage | null, usage?: SummaryUsage): Promise<string>
}

/**
 * At most this many LLM calls for one compaction: a window that was allowed to grow
 * far past the limit (an under-reporting server, an old task resumed) is summarized at
 * a bounded cost, each call within the model's context.
 */
export const MAX_SUMMARY_CALLS = 4

/** What summary requests cost, as the provider reported it (a request without a report counts as sent, with no tokens). */
export type SummaryUsage = RequestsUsage

export function noUsage(): SummaryUsage {
  return { requests: 0, prompt_tokens: 0, completion_tokens: 0, cached_tokens: 0 }
}

/** Two runs of requests added up (`a` absent: `b`). */
export function addUsage(a: SummaryUsage | undefined, b: SummaryUsage): SummaryUsage {
  if (a === undefined) return { ...b }
  return {
    requests: a.requests + b.requests,
    prompt_tokens: a.prompt_tokens + b.prompt_tokens,
    completion_tokens: a.completion_tokens + b.completion_tokens,
    cached_tokens: a.cached_tokens + b.cached_tokens,
  }
}

/** context.compression.summary_max_tokens: a summary request's max_tokens, not the turn's. */
export const SUMMARY_MAX_TOKENS = 1500

export function llmSummarizer(client: LlmClient, options: { maxTokens?: number; maxCalls?: number } = {}): Summarizer {
  const maxCalls = options.maxCalls ?? MAX_SUMMARY_CALLS
  return {
    method: 'llm',
    model: client.model,
    summarize: (previous, messages, _task, usage) =>
      summarizeInChunks(
        client,
        SUMMARY_SYSTEM_PROMPT,
        previous,
        boundedTranscript(messages, chunkBudget(client) * maxCalls),
        summaryBudget(client, options.maxTokens),
        usage,
      ),
  }
}

/**
 * The most tokens a summary may take (its request's max_tokens): summary_max_tokens, at
 * most a quarter of the context. A summary replaces history; one that runs on defeats it
 * (a model that never stops spent minutes on one 4,096-token final summary).
 */
export function summaryBudget(client: LlmClient, maxTokens = SUMMARY_MAX_TOKENS): number {
  return Math.max(256, Math.min(maxTokens, Math.floor(client.contextLength * 0.25)))
}

/** Tokens of transcript one summary call carries: half the context, the rest for the previous summary and the answer. */
function chunkBudget(client: LlmClient): number {
  return Math.max(512, Math.floor(client.contextLength * 0.5))
}

/**
 * Transcript lines of `messages` within `budget` tokens. Over it, long lines are cut
 * harder; if that is not enough, the oldest messages after the first two are replaced
 * by one line that says which were left out and gives an extract of them (files,
 * errors, decisions), so nothing is cut without a summary of what was cut.
 */
export function boundedTranscript(messages: readonly StoredMessage[], budget: number): string[] {
  const cost = (lines: readonly string[]) => lines.reduce((sum, l) => sum + estimateTokens(l), 0)
  const lines = messages.map((m) => transcriptLine(m))
  if (cost(lines) <= budget) return lines
  const perLine = Math.max(400, Math.floor(((budget * 4) / Math.max(1, messages.length)) * 0.9))
  const cut = messages.map((m) => transcriptLine(m, perLine))
  if (cost(cut) <= budget) return cut
  const head = cut.slice(0, 2)
  let room = Math.floor(budget * 0.8) - cost(head)
  let start = cut.length
  while (start > head.length && estimateTokens(cut[start - 1] as string) <= room) room -= estimateTokens(cut[--start] as string)
  const omitted = messages.slice(head.length, start)
  if (omitted.length === 0) return cut
  const extract = extractiveSummary(null, omitted, null)
  const note = `[${omitted.length} messages (seq ${omitted[0]?.seq}–${omitted.at(-1)?.seq}) are not shown here, to bound this summary's cost; they are in messages.jsonl. An extract of them:]\n${extract.slice(0, Math.floor(budget * 0.2) * 4)}`
  return [...head, note, ...cut.slice(start)]
}

export function extractiveSummarizer(): Summarizer {
  return { method: 'extractive', model: null, summarize: async (previous, messages, task) => extractiveSummary(previous, messages, task) }
}

/**
 * Summarizes transcript lines that may exceed the model's context: in chunks of at
 * most half the context, each folded into the summary of the chunks before it, so
 * summaries nest and nothing is dropped unread.
 */
export async function summarizeInChunks(
  client: LlmClient,
  system: string,
  previous: string | null,
  lines: Iterable<string> | AsyncIterable<string>,
  maxTokens: number,
  usage?: SummaryUsage,
): Promise<string> {
  const budget = chunkBudget(client)
  let summary = previous
  let chunk: string[] = []
  let tokens = 0
  const flush = async () => {
    if (chunk.length === 0) return
    summary = await ask(client, system, summary, chunk, maxTokens, usage)
    chunk = []
    tokens = 0
  }
  for await (const whole of lines) {
    // One line never makes a call larger than the context.
    const line = whole.length > budget * 4 ? `${whole.slice(0, budget * 3)}\n[… ${whole.length - budget * 3} characters omitted …]` : whole
    const t = estimateTokens(line)
    if (tokens + t > budget) await flush()
    chunk.push(line)
    tokens += t
  }
  await flush()
  return summary ?? ''
}

async function ask(
  client: LlmClient,
  system: string,
  previous: string | null,
  lines: readonly string[],
  maxTokens: number,
  usage?: SummaryUsage,
): Promise<string> {
  const parts = []
  if (previous) parts.push(`<previous_summary>\n${previous}\n</previous_summary>`)
  parts.push(`<conversation>\n${lines.join('\n')}\n</conversation>`)
  const reply = await client.chat(
    [
      { role: 'system', content: system },
      { role: 'user', content: parts.join('\n\n') },
    ],
    // Its own system prompt, its own transcript: nothing a later request reads from the cache.
    { temperature: 0, maxTokens, cache: false },
  )
  if (usage !== undefined) {
    usage.requests++
    usage.prompt_tokens += reply.usage?.prompt_tokens ?? 0
    usage.completion_tokens += reply.usage?.completion_tokens ?? 0
    usage.cached_tokens += reply.usage?.cached_tokens ?? 0
  }
  const text = reply.message.content?.trim() ?? ''
  if (text === '') throw new ProviderError(`the LLM (${client.model}) returned an empty summary`, 'check the model, or use --extractive')
  return text
}

/**
 * The final summary of a whole task (docs/contract.md §5) from what already holds it: the
 * latest running summary (which folds in every earlier one) and the messages after it,
 * in at most two requests, never by reading the whole history again. The messages go as
 * one request when they fit half the context beside the summary; else the older part
 * that fits goes first and the rest, bounded by boundedTranscript, second.
 */
export async function finalSummary(
  client: LlmClient,
  summary: string | null,
  messages: readonly StoredMessage[],
  maxTokens = SUMMARY_MAX_TOKENS,
  usage?: SummaryUsage,
): Promise<string> {
  const budget = Math.max(512, chunkBudget(client) - (summary === null ? 0 : estimateTokens(summary)))
  const tokens = summaryBudget(client, maxTokens)
  const lines = messages.map((m) => transcriptLine(m))
  let split = 0
  let used = 0
  while (split < lines.length && used + estimateTokens(lines[split] as string) <= budget) used += estimateTokens(lines[split++] as string)
  if (split === lines.length) return ask(client, FINAL_SUMMARY_SYSTEM_PROMPT, summary, lines, tokens, usage)
  // The second request also carries the first one's summary (at most `tokens`).
  const first = split > 0 ? await ask(client, FINAL_SUMMARY_SYSTEM_PROMPT, summary, lines.slice(0, split), tokens, usage) : summary
  const rest = boundedTranscript(messages.slice(split), Math.max(512, chunkBudget(client) - tokens))
  return ask(client, FINAL_SUMMARY_SYSTEM_PROMPT, first, rest, tokens, usage)
}
