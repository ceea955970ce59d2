import { estimateMessageTokens } from '../storage/format/tokens.js'
import type { ChatMessage, ToolSpec, Usage } from './client.js'

/**
 * Usage figures come from the LLM server and are believed only within what the request
 * itself allows (docs/security.md#usage-figures-from-the-server). A server that counts
 * tokens down (a negative figure), sends a fraction, a string, 1e308, or a figure no
 * request of this size could cost, would otherwise bypass `--max-tokens`, or write
 * numbers that JSON, SQLite and PostgreSQL's bigint cannot hold.
 */
export interface UsageBounds {
  /** The most prompt tokens this request can be (see promptBound). */
  prompt: number
  /** The most completion tokens: the request's max_tokens and a margin (see completionBound). */
  completion: number
}

/**
 * Tokens are at least one byte each, a UTF-16 unit at most three bytes, and the estimate
 * at least a quarter of the characters: 12 estimated tokens cover the worst case. A
 * server's template adds a few tokens per message, and a server may add a system text
 * of its own (an Ollama Modelfile's): 32,768 tokens of room for it.
 */
export function promptBound(messages: readonly ChatMessage[], tools: readonly ToolSpec[] | undefined): number {
  let estimated = 0
  for (const message of messages) estimated += estimateMessageTokens(message)
  let toolChars = 0
  for (const tool of tools ?? []) toolChars += specChars(tool)
  return 12 * estimated + 3 * toolChars + 64 * messages.length + 32_768
}

/** Each tool spec's JSON length, made once: the registry gives the same spec objects every turn. */
const specLengths = new WeakMap<ToolSpec, number>()

function specChars(spec: ToolSpec): number {
  let n = specLengths.get(spec)
  if (n === undefined) specLengths.set(spec, (n = JSON.stringify(spec).length + 1))
  return n
}

/** max_tokens, and room for what a server counts beside the answer (reasoning, template tokens). */
export function completionBound(maxTokens: number): number {
  return maxTokens + 4096
}

/** A figure as a count of tokens: a whole number from 0 to `max`, else why not. */
export function tokenCount(value: unknown, max: number): { ok: true; n: number } | { ok: false; why: string } {
  if (typeof value !== 'number') return { ok: false, why: value === undefined || value === null ? 'missing' : `a ${typeof value}` }
  if (!Number.isSafeInteger(value)) return { ok: false, why: Number.isInteger(value) ? `${value} (too large)` : `${value} (not a whole number)` }
  if (value < 0) return { ok: false, why: `${value} (negative)` }
  if (value > max) return { ok: false, why: `${value} (more than this request can be)` }
  return { ok: true, n: value }
}

/** Usage as believed, or null (the caller counts by its estimate instead); `refused` says what was not believed, for a warning. */
export type CheckedUsage = { usage: Usage | null; refused: string | null }

/**
 * OpenAI's (and compatible servers') usage: prompt and completion must both be
 * believable, else the whole report is refused; total is at least their sum (a server
 * that reports less would count the budget down); a cached count that is not believable
 * is left out.
 */
export function checkOpenAiUsage(raw: unknown, bounds: UsageBounds, cached: unknown): CheckedUsage {
  if (raw === undefined || raw === null) return { usage: null, refused: null }
  if (typeof raw !== 'object') return { usage: null, refused: `usage is a ${typeof raw}` }
  const report = raw as Record<string, unknown>
  const prompt = tokenCount(report.prompt_tokens, bounds.prompt)
  if (!prompt.ok) return { usage: null, refused: `prompt_tokens ${prompt.why}` }
  const completion = tokenCount(report.completion_tokens, bounds.completion)
  if (!completion.ok) return { usage: null, refused: `completion_tokens ${completion.why}` }
  const sum = prompt.n + completion.n
  const total = tokenCount(report.total_tokens, bounds.prompt + bounds.completion)
  const usage: Usage = { prompt_tokens: prompt.n, completion_tokens: completion.n, total_tokens: total.ok ? Math.max(total.n, sum) : sum }
  // A total or cached count that is not believable is left out, the rest kept: said all the same.
  const doubts = total.ok ? [] : [`total_tokens ${total.why}`]
  if (cached !== undefined && cached !== null) {
    const hit = tokenCount(cached, prompt.n)
    if (hit.ok && hit.n > 0) usage.cached_tokens = hit.n
    if (!hit.ok) doubts.push(`cached_tokens ${hit.why}`)
  }
  return { usage, refused: doubts.length > 0 ? doubts.join(', ') : null }
}

/**
 * Anthropic's usage: input_tokens and output_tokens must be believable, and the cache's
 * reads and writes (absent or null: none) too, for the prompt is their sum; any one that
 * is not refuses the report.
 */
export function checkAnthropicUsage(raw: Record<string, unknown> | null, bounds: UsageBounds): CheckedUsage {
  if (raw === null) return { usage: null, refused: null }
  const input = tokenCount(raw.input_tokens, bounds.prompt)
  if (!input.ok) return { usage: null, refused: `input_tokens ${input.why}` }
  const output = tokenCount(raw.output_tokens, bounds.completion)
  if (!output.ok) return { usage: null, refused: `output_tokens ${output.why}` }
  const cache: Record<'cache_read_input_tokens' | 'cache_creation_input_tokens', number> = { cache_read_input_tokens: 0, cache_creation_input_tokens: 0 }
  for (const key of ['cache_read_input_tokens', 'cache_creation_input_tokens'] as const) {
    if (raw[key] === undefined || raw[key] === null) continue
    const n = tokenCount(raw[key], bounds.prompt)
    if (!n.ok) return { usage: null, refused: `${key} ${n.why}` }
    cache[key] = n.n
  }
  const read = cache.cache_read_input_tokens
  const written = cache.cache_creation_input_tokens
  const prompt = input.n + read + written
  if (prompt > bounds.prompt) return { usage: null, refused: `input_tokens with the cache's ${prompt} (more than this request can be)` }
  return {
    usage: {
      prompt_tokens: prompt,
      completion_tokens: output.n,
      total_tokens: prompt + output.n,
      ...(read > 0 ? { cached_tokens: read } : {}),
      ...(written > 0 ? { cache_write_tokens: written } : {}),
    },
    refused: null,
  }
}
