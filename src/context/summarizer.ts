import type { LlmClient } from '../llm/client.js'
import { FINAL_SUMMARY_SYSTEM_PROMPT, SUMMARY_SYSTEM_PROMPT } from '../llm/prompts.js'
import { ProviderError } from '../errors.js'
import type { StoredMessage } from '../storage/format/records.js'
import { estimateTokens } from '../storage/format/tokens.js'
import { extractiveSummary } from './extractive.js'
import { transcriptLine } from './transcript.js'

/** Turns earlier context (and the summary before it) into a new summary. */
export interface Summarizer {
  readonly method: 'llm' | 'extractive'
  readonly model: string | null
  summarize(previous: string | null, messages: readonly StoredMessage[], task: StoredMessage | null): Promise<string>
}

export function llmSummarizer(client: LlmClient): Summarizer {
  return {
    method: 'llm',
    model: client.model,
    summarize: (previous, messages) => summarizeInChunks(client, SUMMARY_SYSTEM_PROMPT, previous, messages.map(transcriptLine)),
  }
}

export function extractiveSummarizer(): Summarizer {
  return { method: 'extractive', model: null, summarize: async (previous, messages, task) => extractiveSummary(previous, messages, task) }
}

/**
 * Summarizes transcript lines that may exceed the model's context: in chunks of at
 * most half the context, each folded into the summary of the chunks before it, so
 * summaries nest and nothing is dropped unread.
 */
export async function summarizeInChunks(client: LlmClient, system: string, previous: string | null, lines: Iterable<string> | AsyncIterable<string>): Promise<string> {
  const budget = Math.max(512, Math.floor(client.contextLength * 0.5))
  let summary = previous
  let chunk: string[] = []
  let tokens = 0
  const flush = async () => {
    if (chunk.length === 0) return
    summary = await ask(client, system, summary, chunk)
    chunk = []
    tokens = 0
  }
  for await (const line of lines) {
    const t = estimateTokens(line)
    if (tokens + t > budget) await flush()
    chunk.push(line)
    tokens += t
  }
  await flush()
  return summary ?? ''
}

async function ask(client: LlmClient, system: string, previous: string | null, lines: readonly string[]): Promise<string> {
  const parts = []
  if (previous) parts.push(`<previous_summary>\n${previous}\n</previous_summary>`)
  parts.push(`<conversation>\n${lines.join('\n')}\n</conversation>`)
  const reply = await client.chat(
    [
      { role: 'system', content: system },
      { role: 'user', content: parts.join('\n\n') },
    ],
    { temperature: 0 },
  )
  const text = reply.message.content?.trim() ?? ''
  if (text === '') throw new ProviderError(`the LLM (${client.model}) returned an empty summary`, 'check the model, or use --extractive')
  return text
}

/**
 * The final summary of a whole task (seed 003 §7.4) from its messages, read as a
 * stream: chunked and nested when the history exceeds the model's context.
 */
export async function finalSummary(client: LlmClient, messages: AsyncIterable<StoredMessage>): Promise<string> {
  async function* lines() {
    for await (const m of messages) yield transcriptLine(m)
  }
  return summarizeInChunks(client, FINAL_SUMMARY_SYSTEM_PROMPT, null, lines())
}
