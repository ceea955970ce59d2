import type { ToolCall } from '../storage/format/records.js'

/** A message as the LLM receives it (OpenAI chat shape). */
export interface ChatMessage {
  role: 'system' | 'user' | 'assistant' | 'tool'
  content: string | null
  tool_calls?: ToolCall[]
  tool_call_id?: string
}

export interface ToolSpec {
  type: 'function'
  function: { name: string; description?: string; parameters?: Record<string, unknown> }
}

export interface ChatOptions {
  tools?: ToolSpec[]
  signal?: AbortSignal
  maxTokens?: number
  temperature?: number
  /** False for a request that shares no prefix with the conversation (a compaction's, the final summary's): no prompt-cache breakpoint, which would be a one-use write. */
  cache?: boolean
  /** The request's prompt tokens as the caller estimated them (what a budget check counts), when it has them at hand. */
  promptTokens?: number
}

export interface Usage {
  prompt_tokens: number
  completion_tokens: number
  total_tokens: number
  /** Prompt tokens the provider served from its cache, where it reports them (OpenAI: prompt_tokens_details.cached_tokens; Anthropic: cache_read_input_tokens). */
  cached_tokens?: number
  /** Prompt tokens the provider wrote to its cache, where it reports them (Anthropic: cache_creation_input_tokens). */
  cache_write_tokens?: number
}

export interface ChatResult {
  message: { role: 'assistant'; content: string | null; tool_calls?: ToolCall[] }
  /** As the provider reported it, each figure checked (usage-check.ts); null when it reported none or none believable. */
  usage: Usage | null
  /** What of the provider's usage report was not believed (a negative, fractional, huge or missing figure), for a warning. */
  usageRefused?: string
}

/**
 * A wait before a request is sent again (docs/running.md#waits): how long, why, and
 * which try comes next. Reported as it begins, so that the log, `view` and the task page
 * show every wait, a short one included.
 */
export interface ProviderWait {
  ms: number
  /** The retry it waits for (1 for the first). */
  retry: number
  /** The status of the answer that asked for it. */
  status: number
  /** Why this long: the server's Retry-After (or retry-after-ms), or the client's backoff. */
  reason: string
}

/** What ctxagent needs of a model, whoever serves it. */
export interface LlmClient {
  /** The model name, as recorded in summaries.jsonl. */
  readonly model: string
  /** Where its requests go, for the start line: the server's base URL (never with credentials), or the recording a replay plays. */
  readonly server: string
  /** The model's context length in tokens (config llm.<provider>.context_length). */
  readonly contextLength: number
  chat(messages: ChatMessage[], options?: ChatOptions): Promise<ChatResult>
}
