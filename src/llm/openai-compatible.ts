// The client alone, not the package's index with its Azure and Bedrock clients; of it, ctxagent uses the
// transport (`post`), its retries and errors, and no API resource (docs/development.md#start-up).
import { OpenAI } from 'openai/client'
import type { Config } from '../config/schema.js'
import { untilAborted } from '../abort.js'
import { ProviderError } from '../errors.js'
import type { ChatMessage, ChatOptions, ChatResult, LlmClient, ProviderWait, ToolSpec } from './client.js'
import { boundedFetch, ResponseTooLargeError, ResponseTooSlowError, sdkTimeoutMs } from './bounded-fetch.js'
import { normaliseReply } from './reply.js'
import { checkOpenAiUsage, completionBound, promptBound } from './usage-check.js'
import { limitUntilOf } from './usage-limit.js'
import { maskCredentials } from '../storage/format/mask.js'
import { jsonString } from '../storage/format/json-string.js'
import { explainConnectFailure } from './connect-error.js'

type Endpoint = Config['llm']['openai']

/**
 * Any OpenAI-compatible server through the official SDK: OpenAI, Ollama
 * (`/v1`), vLLM, llama.cpp's server, LM Studio. The SDK retries 408, 409, 429, 5xx
 * and connection errors with exponential backoff (honouring Retry-After) up to
 * `max_retries` times; what still fails becomes one ProviderError line naming the
 * server, the status and what to check.
 */
export class OpenAiCompatibleClient implements LlmClient {
  /** Its transport alone: the bundle has none of the SDK's API resources (docs/development.md#start-up). */
  private readonly client: Pick<OpenAI, 'post'>

  private readonly maxOutputTokens: number
  /** The last request's body: the next one keeps the beginning they share. */
  private lastBody: BuiltBody | null = null
  /** Requests on their way: the last body's buffer is written again only when none is. */
  private inFlight = 0
  private readonly maxResponseBytes: number

  constructor(
    private readonly endpoint: Endpoint,
    private readonly provider: string,
    /** llm.max_output_tokens, llm.max_retry_wait (seconds), llm.max_response_bytes. */
    limits: { maxOutputTokens?: number; maxRetryWait?: number; maxResponseBytes?: number; onWait?: (wait: ProviderWait) => void } = {},
  ) {
    // max_tokens of a request that names none.
    this.maxOutputTokens = limits.maxOutputTokens ?? 4096
    this.maxResponseBytes = limits.maxResponseBytes ?? 32 * 1024 * 1024
    // llm.max_retry_wait: a server's wait past it is a usage limit (usage-limit.ts), the caller's to wait out.
    const bounds = {
      totalMs: endpoint.timeout_seconds * 1000,
      maxBytes: this.maxResponseBytes,
      maxRetryWaitMs: (limits.maxRetryWait ?? 60) * 1000,
      maxRetries: endpoint.max_retries,
      ...(limits.onWait ? { onWait: limits.onWait } : {}),
    }
    this.client = new OpenAI({
      baseURL: endpoint.base_url,
      // Local servers need no key, but the SDK insists on one.
      apiKey: endpoint.api_key ?? 'not-needed',
      timeout: sdkTimeoutMs(bounds),
      maxRetries: endpoint.max_retries,
      fetch: boundedFetch(bounds),
    })
  }

  get model(): string {
    return this.endpoint.model
  }

  get server(): string {
    return this.endpoint.base_url
  }

  get contextLength(): number {
    return this.endpoint.context_length
  }

  async chat(messages: ChatMessage[], options: ChatOptions = {}): Promise<ChatResult> {
    try {
      // The body as bytes, JSON.stringify of the request to the byte, built from each
      // message's JSON made once (a window of thousands of messages is not serialised
      // again every turn). The SDK sends bytes as they are, and resends them on a retry.
      const maxTokens = Math.min(options.maxTokens ?? this.maxOutputTokens, this.maxOutputTokens)
      const built = requestBody(this.endpoint.model, messages, options.tools, maxTokens, options.temperature, this.lastBody, this.inFlight === 0)
      this.lastBody = built
      const pending = this.client.post<OpenAI.Chat.ChatCompletion>('/chat/completions', {
        body: built.bytes,
        headers: { 'content-type': 'application/json' },
        stream: false,
        ...(options.signal ? { signal: options.signal } : {}),
      })
      // The body is the SDK's until its last try is over (a stop may end this call sooner).
      this.inFlight++
      const settled = () => void this.inFlight--
      pending.then(settled, settled)
      // The SDK's wait between retries does not listen to the signal: the stop ends the call here.
      const response = options.signal ? await untilAborted(pending, options.signal, () => new OpenAI.APIUserAbortError()) : await pending
      if (!Array.isArray((response as { choices?: unknown } | null)?.choices)) {
        throw new ProviderError(
          `${this.where()} answered with something that is not a chat completion (an HTML page, or another API)`,
          `check llm.${this.provider}.base_url (OpenAI-compatible servers serve /v1)`,
        )
      }
      const choice = response.choices[0]
      if (!choice) throw new ProviderError(`${this.where()} returned no choices`, 'check that the model name is right for this server')
      // The server's figures are believed within what this request can cost (usage-check.ts).
      const checked = checkOpenAiUsage(
        response.usage,
        { prompt: promptBound(messages, options.tools), completion: completionBound(maxTokens) },
        cachedOf(response),
      )
      return { message: normaliseReply(choice.message), usage: checked.usage, ...(checked.refused !== null ? { usageRefused: checked.refused } : {}) }
    } catch (err) {
      const explained = this.explain(err)
      // A server may echo the key it was sent (or any secret): the message leaves masked.
      explained.message = maskCredentials(explained.message)
      throw explained
    }
  }

  private where(): string {
    return `LLM server ${this.endpoint.base_url} (${this.provider}, model ${this.endpoint.model})`
  }

  private explain(err: unknown): Error {
    if (err instanceof ProviderError) return err
    const keyHint = this.provider === 'openai' ? 'llm.openai.api_key or OPENAI_API_KEY' : `llm.${this.provider}.api_key`
    if (err instanceof OpenAI.APIUserAbortError) return new ProviderError(`request to ${this.where()} was cancelled`)
    const bound = boundHit(err)
    if (bound instanceof ResponseTooLargeError)
      return new ProviderError(`${this.where()}: ${bound.message}`, 'a chat completion is far smaller: check the server, or raise llm.max_response_bytes', err)
    if (bound instanceof ResponseTooSlowError)
      return new ProviderError(`${this.where()}: ${bound.message}`, `check the server, or raise llm.${this.provider}.timeout_seconds`, err, 'timeout')
    if (err instanceof OpenAI.APIConnectionTimeoutError) {
      return new ProviderError(
        `${this.where()} did not answer within ${this.endpoint.timeout_seconds}s`,
        `check the server, or raise llm.${this.provider}.timeout_seconds`,
        err,
        'timeout',
      )
    }
    if (err instanceof OpenAI.APIConnectionError) {
      const why = explainConnectFailure(err, `llm.${this.provider}.base_url`)
      const cause = why?.what ?? (err.cause as Error | undefined)?.message ?? err.message
      return new ProviderError(`cannot reach ${this.where()}: ${cause}`, why?.hint ?? `is it running? check llm.${this.provider}.base_url`, err, 'unreachable')
    }
    if (err instanceof OpenAI.AuthenticationError) return new ProviderError(`${this.where()} refused the API key (401)`, `check ${keyHint}`, err)
    if (err instanceof OpenAI.NotFoundError)
      return new ProviderError(
        `${this.where()} answered 404: ${firstLine(err.message)}`,
        `check llm.${this.provider}.model and base_url (OpenAI-compatible servers serve /v1)`,
        err,
      )
    if (err instanceof OpenAI.APIError) {
      const failure = err.status === 429 ? 'rate_limited' : (err.status ?? 0) >= 500 ? 'server_error' : null
      const until = limitUntilOf(err)
      if (until !== null)
        return new ProviderError(
          `${this.where()} answered ${err.status}: a usage limit until ${until.toISOString()}: ${firstLine(err.message)}`,
          'the task goes on once it lifts',
          err,
          'rate_limited',
          until,
        )
      const retried = failure !== null ? ` after ${this.endpoint.max_retries} retries` : ''
      return new ProviderError(
        `${this.where()} answered ${err.status ?? 'an error'}${retried}: ${firstLine(err.message)}`,
        'check the server logs',
        err,
        failure,
      )
    }
    return new ProviderError(`${this.where()} failed: ${(err as Error).message}`, 'set CTXAGENT_DEBUG=1 for details', err)
  }
}

/** Each message's JSON (of its wire shape), made once: messages are never changed once made (prune and clip copy them). */
const messageJson = new WeakMap<object, Buffer>()

function jsonOf(message: ChatMessage): Buffer {
  let bytes = messageJson.get(message)
  if (bytes === undefined) {
    bytes = Buffer.from(wireJson(message))
    messageJson.set(message, bytes)
  }
  return bytes
}

/**
 * The request's JSON, byte for byte what JSON.stringify({model, messages (wire shape),
 * tools?, max_tokens, temperature?}) gives, assembled from cached pieces: a turn
 * serialises only its new messages. `previous` (the body this function built last, for
 * the same client) lends its beginning: the messages both requests start with, the same
 * objects, are bytes already in its buffer. With `reuse` (nothing is sending `previous`
 * any more) the new messages are written into that buffer after them, in place: a turn
 * copies and allocates only its new bytes; otherwise, or when it has no room, a new
 * buffer (half as large again, for the turns to come) gets a copy of the beginning.
 */
export function requestBody(
  model: string,
  messages: readonly ChatMessage[],
  tools: readonly ToolSpec[] | undefined,
  maxTokens: number,
  temperature: number | undefined,
  previous: BuiltBody | null = null,
  reuse = false,
): BuiltBody {
  const head = `{"model":${JSON.stringify(model)},"messages":[`
  // The messages this body shares with the previous one, from the start.
  let shared = 0
  if (previous !== null && previous.head === head) {
    const before = previous.messages
    const most = Math.min(before.length, messages.length)
    while (shared < most && before[shared] === messages[shared]) shared++
  }
  const n = messages.length
  const parts: Buffer[] = new Array(n - shared)
  const start = shared > 0 ? ((previous as BuiltBody).ends[shared - 1] as number) : Buffer.byteLength(head)
  let size = start
  for (let i = shared; i < n; i++) {
    const part = jsonOf(messages[i] as ChatMessage)
    parts[i - shared] = part
    size += part.length + (i > 0 ? 1 : 0)
  }
  const toolList = toolsJson(tools, previous)
  const tail = `]${toolList.json},"max_tokens":${JSON.stringify(maxTokens)}${temperature === undefined ? '' : `,"temperature":${JSON.stringify(temperature)}`}}`
  const total = size + Buffer.byteLength(tail)
  let store: Buffer
  if (reuse && previous !== null && previous.store.length >= total) {
    store = previous.store
  } else {
    store = Buffer.allocUnsafe(Math.max(MIN_STORE, total + (total >> 1)))
    if (shared > 0) store.set((previous as BuiltBody).store.subarray(0, start), 0)
  }
  // Where each message ends, in the previous body's array when the buffer is reused too
  // (its first `shared` entries are these): a new array each turn was a few KB outside the
  // heap that outlived the turn and waited for a full GC (docs/development.md#memory).
  let ends: Float64Array
  if (store === previous?.store && previous.ends.length >= n) {
    ends = previous.ends
  } else {
    ends = new Float64Array(Math.max(MIN_ENDS, n + (n >> 1)))
    if (shared > 0) ends.set((previous as BuiltBody).ends.subarray(0, shared), 0)
  }
  let at = shared > 0 ? start : store.write(head, 0)
  for (let i = shared; i < n; i++) {
    if (i > 0) store[at++] = COMMA
    const part = parts[i - shared] as Buffer
    store.set(part, at)
    at += part.length
    ends[i] = at
  }
  at += store.write(tail, at)
  if (previous !== null) forgetJson(previous, shared, messages)
  return { head, messages: messages.slice(), shared, ends, bytes: store.subarray(0, at), store, tools: toolList.tools, toolsJson: toolList.json }
}

/**
 * Drops the JSON of messages the next body will not copy from jsonOf: those the previous
 * body sent and this one does not (a tool result replaced by its pruned copy, a window
 * replaced by a compaction), and those that have just become part of the beginning both
 * share, whose bytes the next body takes from this one's buffer. Kept for as long as the
 * message object (until the next compaction), each message's JSON was a second copy of the
 * window that a full GC had to free (docs/development.md#memory); a body that must
 * write one of them again (its beginning cut to fit the budget) serialises it again.
 */
function forgetJson(previous: BuiltBody, shared: number, messages: readonly ChatMessage[]): void {
  const before = previous.messages
  for (let i = previous.shared; i < Math.min(shared, before.length); i++) messageJson.delete(before[i] as ChatMessage)
  if (shared >= before.length) return
  const sent = new Set<ChatMessage>()
  for (let i = shared; i < messages.length; i++) sent.add(messages[i] as ChatMessage)
  for (let i = shared; i < before.length; i++) if (!sent.has(before[i] as ChatMessage)) messageJson.delete(before[i] as ChatMessage)
}

/** `,"tools":[…]` (or nothing), taken from `previous` when its tools are the same objects. */
function toolsJson(tools: readonly ToolSpec[] | undefined, previous: BuiltBody | null): { tools: readonly ToolSpec[]; json: string } {
  const list = tools ?? []
  const before = previous?.tools
  if (before !== undefined && before.length === list.length && before.every((t, i) => t === list[i])) return { tools: before, json: previous?.toolsJson ?? '' }
  return { tools: list.slice(), json: list.length > 0 ? `,"tools":[${list.map((t) => JSON.stringify(t)).join(',')}]` : '' }
}

/** A request body as requestBody built it, and where each message's JSON ends in it. */
export interface BuiltBody {
  head: string
  messages: readonly ChatMessage[]
  /** How many of `messages` began the body it was built after, their bytes taken from it. */
  shared: number
  /** Entry i: where message i's JSON ends in `store`; entries past `messages` are garbage. */
  ends: Float64Array
  /** The body: the beginning of `store`. */
  bytes: Buffer
  /** The buffer the body was written in; the next body may be written in it too (see requestBody). */
  store: Buffer
  tools: readonly ToolSpec[]
  /** `,"tools":[…]` as in the body, or empty. */
  toolsJson: string
}

/** A body buffer is at least this large (a short conversation grows into it). */
const MIN_STORE = 64 * 1024
/** And its `ends` has room for at least this many messages. */
const MIN_ENDS = 256

const COMMA = 0x2c

/**
 * A message as the API defines it, as JSON: ctxagent's records carry more (tool_name,
 * seq…), and strict servers refuse fields they do not know. What JSON.stringify gives of
 * {role, content, tool_calls?, tool_call_id?}, the content escaped by jsonString (a tool
 * result was escaped already, when it was recorded).
 */
function wireJson(m: ChatMessage): string {
  let out = `{"role":${JSON.stringify(m.role)}`
  if (m.content !== undefined) out += `,"content":${typeof m.content === 'string' ? jsonString(m.content) : JSON.stringify(m.content)}`
  if (m.tool_calls?.length) out += `,"tool_calls":${JSON.stringify(m.tool_calls)}`
  if (m.tool_call_id !== undefined) out += `,"tool_call_id":${JSON.stringify(m.tool_call_id)}`
  return `${out}}`
}

/** The bound a failed request hit (in the error or its causes), if any. */
function boundHit(err: unknown): Error | null {
  for (let e = err, depth = 0; e instanceof Error && depth < 5; e = e.cause, depth++) {
    if (e instanceof ResponseTooLargeError || e instanceof ResponseTooSlowError) return e
  }
  return null
}

function firstLine(text: string): string {
  return (text.split('\n')[0] ?? text).slice(0, 300)
}

/** The parts of a chat completion that say how much of the prompt a server served from its cache. */
interface CacheReport {
  usage?: { prompt_tokens_details?: { cached_tokens?: unknown } | null } | null
  /** llama.cpp's server: prompt tokens reused from its KV cache. */
  timings?: { cache_n?: unknown } | null
  tokens_cached?: unknown
}

/**
 * Cached prompt tokens, where the server reports them: OpenAI's (and vLLM's)
 * `usage.prompt_tokens_details.cached_tokens`, else llama.cpp's `timings.cache_n` or
 * `tokens_cached`; as sent (checkOpenAiUsage believes it or not), undefined where none is.
 */
export function cachedOf(response: CacheReport): unknown {
  for (const value of [response.usage?.prompt_tokens_details?.cached_tokens, response.timings?.cache_n, response.tokens_cached]) {
    if (value !== undefined && value !== null) return value
  }
  return undefined
}
