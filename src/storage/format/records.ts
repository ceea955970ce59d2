import type { JsonRecord } from './jsonl.js'

export type Role = 'system' | 'user' | 'assistant' | 'tool'
export const ROLES: readonly Role[] = ['system', 'user', 'assistant', 'tool']

/** An assistant's tool call, OpenAI shape. */
export interface ToolCall {
  id: string
  type: 'function'
  function: { name: string; arguments: string }
}

/** One line of messages.jsonl as ctxagent writes it (docs/contract.md §2.3). */
export interface StoredMessage {
  seq: number
  role: Role
  content: string
  timestamp: string
  token_count: number
  tool_name?: string
  tool_call_id?: string
  tool_calls?: ToolCall[]
  visible?: boolean
  is_summarized?: boolean
  /** The inbox.jsonl record (chat message or comment) this user message came from. */
  inbox_id?: string
  /** An assistant message: the tokens of the request that produced it (the provider's, or estimated). */
  usage?: TurnUsage
}

/** One LLM request's tokens: prompt (of which cached) and completion; `estimated` when the provider reported none. */
export interface TurnUsage {
  prompt_tokens: number
  completion_tokens: number
  cached_tokens?: number
  /** Prompt tokens written to the provider's cache (Anthropic). */
  cache_write_tokens?: number
  estimated?: true
}

/** One line of current.jsonl: what the LLM is given (docs/contract.md §2.4). */
export interface WindowMessage {
  role: Role
  content: string
  tool_name?: string
  tool_call_id?: string
  tool_calls?: ToolCall[]
}

/** One line of summaries.jsonl: the superset of both original designs (docs/contract.md §11) (docs/contract.md §2.5). */
export interface SummaryRecord {
  summary_id: number
  start_seq: number
  end_seq: number
  summary: string
  created_at: string
  original_tokens: number
  summary_tokens: number
  compression_ratio: number
  compressed_message_count: number
  tokens_saved: number
  method: 'llm' | 'extractive'
  model: string | null
  /** The control request (`ctxagent compress` of a live owner) this summary answers. */
  request_id?: string
  /** What the summary's LLM requests cost, as the provider reported it (an LLM summary only). */
  usage?: RequestsUsage
}

/** The tokens of a run of LLM requests that are not turns (a compaction's, the final summary's). */
export interface RequestsUsage {
  requests: number
  prompt_tokens: number
  completion_tokens: number
  cached_tokens: number
}

export interface ToolRecord {
  seq: number
  tool_name: string
  arguments: Record<string, unknown>
  result: unknown
  status: 'success' | 'error'
  error: string | null
  duration_ms: number
  timestamp: string
}

/**
 * A connection a sandboxed command (or MCP server) made through the egress proxy, in
 * tools.jsonl beside the tool records (docs/security.md#the-network): the shape of a tool
 * record, `kind: network`, and the `seq` of the tool record before it (it is not a call:
 * counts and tallies leave it out). `status` is success when the connection went
 * through, else error with the reason.
 */
export interface NetworkRecord extends ToolRecord {
  kind: 'network'
  tool_name: 'network'
  arguments: { by: string; method: string; host: string; port: number }
  result: { allowed: boolean; address: string | null; bytes_up: number; bytes_down: number }
}

/** Whether a tools.jsonl line is a network record rather than a tool call. */
export const isNetworkRecord = (record: { kind?: unknown }): boolean => record.kind === 'network'

export interface PlanningRecord {
  id: number
  plan_type: string
  plan_content: string
  created_at: string
}

const num = (value: unknown): number | undefined => (typeof value === 'number' && Number.isFinite(value) ? value : undefined)
const str = (value: unknown): string | undefined => (typeof value === 'string' ? value : undefined)

/**
 * Reads a messages.jsonl line in either original design's spelling (docs/contract.md §11) (`tokens` for `token_count`,
 * legacy `function_call` for `tool_calls`) into the canonical shape. Returns null when
 * the line is not a message at all.
 */
export function normalizeMessage(raw: JsonRecord): StoredMessage | null {
  const role = raw.role
  if (typeof role !== 'string' || !(ROLES as readonly string[]).includes(role)) return null
  const content = typeof raw.content === 'string' ? raw.content : raw.content == null ? '' : JSON.stringify(raw.content)
  const message: StoredMessage = {
    seq: num(raw.seq) ?? 0,
    role: role as Role,
    content,
    timestamp: str(raw.timestamp) ?? '',
    token_count: num(raw.token_count) ?? num(raw.tokens) ?? 0,
  }
  const toolName = str(raw.tool_name)
  if (toolName !== undefined) message.tool_name = toolName
  const toolCallId = str(raw.tool_call_id)
  if (toolCallId !== undefined) message.tool_call_id = toolCallId
  const calls = toolCallsOf(raw)
  if (calls !== undefined) message.tool_calls = calls
  if (raw.visible === false) message.visible = false
  if (raw.is_summarized === true) message.is_summarized = true
  const inboxId = str(raw.inbox_id)
  if (inboxId !== undefined) message.inbox_id = inboxId
  return message
}

function toolCallsOf(raw: JsonRecord): ToolCall[] | undefined {
  if (Array.isArray(raw.tool_calls)) return raw.tool_calls as ToolCall[]
  const legacy = raw.function_call
  if (legacy !== null && typeof legacy === 'object') {
    const fn = legacy as { name?: unknown; arguments?: unknown }
    const args = typeof fn.arguments === 'string' ? fn.arguments : JSON.stringify(fn.arguments ?? {})
    return [{ id: `call_${num(raw.seq) ?? 0}`, type: 'function', function: { name: String(fn.name ?? ''), arguments: args } }]
  }
  return undefined
}

/** Reads a summaries.jsonl line in either original design's spelling (docs/contract.md §11) (`id` for `summary_id`). */
export function normalizeSummary(raw: JsonRecord): SummaryRecord | null {
  const summary = str(raw.summary)
  if (summary === undefined) return null
  const original = num(raw.original_tokens) ?? 0
  const summaryTokens = num(raw.summary_tokens) ?? 0
  return {
    summary_id: num(raw.summary_id) ?? num(raw.id) ?? 0,
    start_seq: num(raw.start_seq) ?? 0,
    end_seq: num(raw.end_seq) ?? 0,
    summary,
    created_at: str(raw.created_at) ?? '',
    original_tokens: original,
    summary_tokens: summaryTokens,
    compression_ratio: num(raw.compression_ratio) ?? (original > 0 ? summaryTokens / original : 0),
    compressed_message_count: num(raw.compressed_message_count) ?? 0,
    tokens_saved: num(raw.tokens_saved) ?? Math.max(0, original - summaryTokens),
    method: raw.method === 'extractive' ? 'extractive' : 'llm',
    model: str(raw.model) ?? null,
  }
}

/** The current.jsonl form of a stored message. */
export function toWindowMessage(message: StoredMessage): WindowMessage {
  const out: WindowMessage = { role: message.role, content: message.content }
  if (message.tool_name !== undefined) out.tool_name = message.tool_name
  if (message.tool_call_id !== undefined) out.tool_call_id = message.tool_call_id
  if (message.tool_calls !== undefined) out.tool_calls = message.tool_calls
  return out
}
