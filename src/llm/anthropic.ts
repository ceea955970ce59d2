import { setTimeout as delay } from 'node:timers/promises'
import type Anthropic from '@anthropic-ai/sdk'
import type { Stream } from '@anthropic-ai/sdk/streaming'
import type { Config } from '../config/schema.js'
import { untilAborted } from '../abort.js'
import { ProviderError } from '../errors.js'
import { maskCredentials } from '../storage/format/mask.js'
import type { ChatMessage, ChatOptions, ChatResult, LlmClient, ProviderWait } from './client.js'
import { checkAnthropicUsage, completionBound, promptBound } from './usage-check.js'
import type { UsageBounds } from './usage-check.js'
import { boundedFetch, ResponseTooLargeError, ResponseTooSlowError } from './bounded-fetch.js'
import { normaliseReply } from './reply.js'
import { limitUntilOf } from './usage-limit.js'
import { messagesRequest } from './anthropic-request.js'
import type { MessagesRequest } from './anthropic-request.js'
import { explainConnectFailure } from './connect-error.js'

type Endpoint = Config['llm']['anthropic']

/** The SDK's client class, its error classes on it. */
type Sdk = typeof Anthropic

/**
 * The SDK (a megabyte of code), loaded by the first request: every other `run`, on
 * another provider, and every other command start without it.
 */
let sdkLoading: Promise<Sdk> | null = null
function loadSdk(): Promise<Sdk> {
  return (sdkLoading ??= import('@anthropic-ai/sdk').then((m) => m.default))
}

/** What a reply is made of, streamed or not: text and tool_use blocks in order, and the usage. */
interface Collected {
  blocks: ({ type: 'text'; text: string } | { type: 'tool_use'; id: string; name: string; json: string; input: unknown })[]
  /** As the server sent it (its figures checked by usage-check.ts when the reply is made). */
  usage: Record<string, unknown> | null
}

/**
 * Requests go by the SDK's post (its retries, errors and stream parsing) rather than
 * messages.create, which writes to the console (a deprecated model, once a request):
 * a line on stderr that is not ctxagent's breaks `--log-format json`.
 */
const MESSAGES = '/v1/messages'

/** Errors a server sends in the middle of a stream (after its 200) that another try may not meet. */
const PASSING_STREAM_ERRORS = new Set(['overloaded_error', 'api_error', 'rate_limit_error'])

/**
 * Anthropic's Messages API through the official SDK. The SDK retries 408, 409, 429,
 * 5xx (529 overloaded included) and connection errors with exponential backoff
 * (honouring retry-after, cut to llm.max_retry_wait) up to `max_retries` times; an
 * error that arrives inside a stream after its 200 (overloaded) is tried again the same
 * number of times here. What still fails becomes one ProviderError line naming the
 * server, the status and what to check; a request too long for the model says "prompt
 * is too long", which `run` answers with a compaction and one more try.
 */
export class AnthropicClient implements LlmClient {
  private sdk: Sdk | null = null
  private client: Anthropic | null = null
  private readonly maxOutputTokens: number
  /** The pruned result the last agent request had a breakpoint on (anthropic-request.ts: kept on the next when prune moves on). */
  private lastStub: string | null = null

  constructor(
    private readonly endpoint: Endpoint,
    /** llm.max_output_tokens, llm.max_retry_wait (seconds), llm.max_response_bytes. */
    private readonly limits: { maxOutputTokens?: number; maxRetryWait?: number; maxResponseBytes?: number; onWait?: (wait: ProviderWait) => void } = {},
  ) {
    this.maxOutputTokens = limits.maxOutputTokens ?? 4096
  }

  /** The SDK's client, made by the first request. */
  private async ready(): Promise<{ sdk: Sdk; client: Anthropic }> {
    if (this.sdk !== null && this.client !== null) return { sdk: this.sdk, client: this.client }
    const sdk = await loadSdk()
    const { endpoint, limits } = this
    const client = new sdk({
      baseURL: endpoint.base_url,
      // Always given: with none, the SDK would look for credentials of its own (ANTHROPIC_AUTH_TOKEN, profile files).
      // A proxy may need no key; the API itself refuses requests without one (checked before a task starts).
      apiKey: endpoint.api_key ?? 'not-needed',
      timeout: endpoint.timeout_seconds * 1000,
      maxRetries: endpoint.max_retries,
      fetch: boundedFetch({
        totalMs: endpoint.timeout_seconds * 1000,
        maxBytes: limits.maxResponseBytes ?? 32 * 1024 * 1024,
        maxRetryWaitMs: (limits.maxRetryWait ?? 60) * 1000,
        maxRetries: endpoint.max_retries,
        ...(limits.onWait ? { onWait: limits.onWait } : {}),
      }),
      // The SDK logs to the console (stdout of a --json command) and may trace: ctxagent logs and traces itself.
      logLevel: 'off',
      openTelemetry: false,
    })
    this.sdk = sdk
    this.client = client
    return { sdk, client }
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
    const maxTokens = Math.min(options.maxTokens ?? this.maxOutputTokens, this.maxOutputTokens)
    const cache = options.cache !== false
    const { stub, ...body } = messagesRequest(this.endpoint.model, messages, options.tools, maxTokens, options.temperature, {
      cache,
      previousStub: this.lastStub,
    })
    // The conversation's boundary, for the next request (a summary's request has none and changes nothing).
    if (cache && stub !== undefined) this.lastStub = stub
    try {
      const { sdk, client } = await this.ready()
      for (let attempt = 0; ; attempt++) {
        try {
          // The SDK's wait between retries does not listen to the signal: the stop ends the call here.
          const pending = this.endpoint.stream ? this.streamed(sdk, client, body, options.signal) : this.whole(client, body, options.signal)
          const collected = options.signal ? await untilAborted(pending, options.signal, () => new sdk.APIUserAbortError()) : await pending
          return resultOf(collected, { prompt: promptBound(messages, options.tools), completion: completionBound(maxTokens) })
        } catch (err) {
          if (!(attempt < this.endpoint.max_retries && passingStreamError(sdk, err))) throw err
          await delay(Math.min(500 * 2 ** attempt, 8000), undefined, options.signal ? { signal: options.signal } : {})
        }
      }
    } catch (err) {
      const explained = this.explain(err)
      // A server may echo the key it was sent (or any secret): the message leaves masked.
      explained.message = maskCredentials(explained.message)
      throw explained
    }
  }

  /**
   * One request answered as a stream of server-sent events, collected into the reply.
   * The bounded fetch reads the whole stream (within timeout_seconds, up to
   * max_response_bytes) before the events are parsed: streaming keeps a long answer's
   * connection busy (what Anthropic asks of long requests), it does not show the answer
   * as it comes.
   */
  private async streamed(sdk: Sdk, client: Anthropic, body: MessagesRequest, signal: AbortSignal | undefined): Promise<Collected> {
    const stream = await client.post<Stream<Anthropic.RawMessageStreamEvent>>(MESSAGES, {
      body: { ...body, stream: true },
      stream: true,
      ...(signal ? { signal } : {}),
    })
    const collected: Collected = { blocks: [], usage: null }
    let started = false
    let stopped = false
    // Each event as the server sent it: a field missing (a broken or hostile server) is no crash.
    for await (const event of stream) {
      if (event.type === 'message_start') {
        started = true
        const usage: unknown = event.message?.usage
        collected.usage = usage !== null && typeof usage === 'object' ? { ...usage } : {}
      } else if (event.type === 'content_block_start') {
        const block = event.content_block
        if (block?.type === 'text' && typeof block.text === 'string') collected.blocks[event.index] = { type: 'text', text: block.text }
        else if (block?.type === 'tool_use') collected.blocks[event.index] = { type: 'tool_use', id: block.id, name: block.name, json: '', input: block.input }
      } else if (event.type === 'content_block_delta') {
        const block = collected.blocks[event.index]
        if (event.delta?.type === 'text_delta' && block?.type === 'text' && typeof event.delta.text === 'string') block.text += event.delta.text
        else if (event.delta?.type === 'input_json_delta' && block?.type === 'tool_use' && typeof event.delta.partial_json === 'string')
          block.json += event.delta.partial_json
      } else if (event.type === 'message_delta') {
        // The final counts; a field the delta leaves null keeps message_start's (any other value is checked, not skipped).
        const delta = Object.fromEntries(Object.entries(event.usage ?? {}).filter(([, v]) => v !== null && v !== undefined))
        collected.usage = { ...collected.usage, ...delta }
      } else if (event.type === 'message_stop') {
        stopped = true
      }
    }
    // The SDK ends a stream it was told to abort without an error: a stop is not an answer.
    if (signal?.aborted) throw new sdk.APIUserAbortError()
    if (!started)
      throw new ProviderError(
        `${this.where()} answered with something that is not a Messages API stream (an HTML page, or another API)`,
        'check llm.anthropic.base_url (Anthropic serves /v1/messages under https://api.anthropic.com)',
      )
    if (!stopped)
      throw new ProviderError(
        `${this.where()} ended its stream before the message was complete`,
        'check the server (or a proxy in between), or set llm.anthropic.stream: false',
      )
    return collected
  }

  /** One request answered with the whole message. */
  private async whole(client: Anthropic, body: MessagesRequest, signal: AbortSignal | undefined): Promise<Collected> {
    const message: unknown = await client.post<unknown>(MESSAGES, { body: { ...body, stream: false }, stream: false, ...(signal ? { signal } : {}) })
    const content = (message as { content?: unknown } | null)?.content
    if (!Array.isArray(content)) {
      throw new ProviderError(
        `${this.where()} answered with something that is not a Messages API message (an HTML page, or another API)`,
        'check llm.anthropic.base_url (Anthropic serves /v1/messages under https://api.anthropic.com)',
      )
    }
    const blocks: Collected['blocks'] = []
    for (const block of content as { type?: unknown; text?: unknown; id?: unknown; name?: unknown; input?: unknown }[]) {
      if (block?.type === 'text' && typeof block.text === 'string') blocks.push({ type: 'text', text: block.text })
      else if (block?.type === 'tool_use')
        blocks.push({
          type: 'tool_use',
          id: typeof block.id === 'string' ? block.id : '',
          name: typeof block.name === 'string' ? block.name : '',
          json: '',
          input: block.input,
        })
    }
    const usage = (message as { usage?: unknown }).usage
    return { blocks, usage: usage !== null && typeof usage === 'object' && !Array.isArray(usage) ? (usage as Record<string, unknown>) : null }
  }

  private where(): string {
    return `LLM server ${this.endpoint.base_url} (anthropic, model ${this.endpoint.model})`
  }

  private explain(err: unknown): Error {
    if (err instanceof ProviderError) return err
    const sdk = this.sdk
    if ((sdk !== null && err instanceof sdk.APIUserAbortError) || (err instanceof Error && err.name === 'AbortError'))
      return new ProviderError(`request to ${this.where()} was cancelled`)
    const bound = boundHit(err)
    if (bound instanceof ResponseTooLargeError)
      return new ProviderError(`${this.where()}: ${bound.message}`, 'a message is far smaller: check the server, or raise llm.max_response_bytes', err)
    if (bound instanceof ResponseTooSlowError)
      return new ProviderError(`${this.where()}: ${bound.message}`, 'check the server, or raise llm.anthropic.timeout_seconds', err)
    if (sdk === null) return new ProviderError(`${this.where()} failed: ${(err as Error).message}`, 'set CTXAGENT_DEBUG=1 for details', err)
    if (err instanceof sdk.APIConnectionTimeoutError)
      return new ProviderError(
        `${this.where()} did not answer within ${this.endpoint.timeout_seconds}s`,
        'check the server, or raise llm.anthropic.timeout_seconds',
        err,
      )
    if (err instanceof sdk.APIConnectionError) {
      const why = explainConnectFailure(err, 'llm.anthropic.base_url')
      const cause = why?.what ?? (err.cause as Error | undefined)?.message ?? err.message
      return new ProviderError(`cannot reach ${this.where()}: ${cause}`, why?.hint ?? 'is it running? check llm.anthropic.base_url', err)
    }
    if (err instanceof sdk.AuthenticationError)
      return new ProviderError(`${this.where()} refused the API key (401)`, 'check llm.anthropic.api_key or ANTHROPIC_API_KEY', err)
    if (err instanceof sdk.NotFoundError)
      return new ProviderError(`${this.where()} answered 404: ${apiMessage(err)}`, 'check llm.anthropic.model and base_url', err)
    if (err instanceof sdk.APIError) {
      if (err.status === undefined)
        return new ProviderError(
          `${this.where()} sent an error in its stream${this.endpoint.max_retries > 0 && passingStreamError(sdk, err) ? ` (${this.endpoint.max_retries} retries)` : ''}: ${apiMessage(err)}`,
          'try again later (resume the task)',
          err,
        )
      const until = limitUntilOf(err)
      if (until !== null)
        return new ProviderError(
          `${this.where()} answered ${err.status}: a usage limit until ${until.toISOString()}: ${apiMessage(err)}`,
          'the task goes on once it lifts',
          err,
          'rate_limited',
          until,
        )
      const retried = err.status === 429 || err.status >= 500 ? ` after ${this.endpoint.max_retries} retries` : ''
      return new ProviderError(
        `${this.where()} answered ${err.status}${retried}: ${apiMessage(err)}`,
        err.status === 529 ? 'Anthropic is overloaded: resume the task later' : 'check the server logs',
        err,
      )
    }
    return new ProviderError(`${this.where()} failed: ${(err as Error).message}`, 'set CTXAGENT_DEBUG=1 for details', err)
  }
}

/**
 * The reply as ctxagent records it: the text blocks joined, each tool_use a call with
 * its arguments as JSON text. The usage as ctxagent counts it: the API's input_tokens
 * are only the tokens after the last cache breakpoint it read or wrote, so the prompt is
 * those plus the cache's reads and writes (what the context holds, and what compaction
 * is judged by); every figure checked against the request (usage-check.ts).
 */
function resultOf({ blocks, usage }: Collected, bounds: UsageBounds): ChatResult {
  const text = blocks.filter((b) => b?.type === 'text').map((b) => b.text)
  const calls = blocks.flatMap((b) =>
    b?.type === 'tool_use' ? [{ id: b.id, type: 'function', function: { name: b.name, arguments: b.json !== '' ? b.json : (b.input ?? {}) } }] : [],
  )
  const checked = checkAnthropicUsage(usage, bounds)
  return {
    message: normaliseReply({ content: text.length > 0 ? text.join('') : null, tool_calls: calls }),
    usage: checked.usage,
    ...(checked.refused !== null ? { usageRefused: checked.refused } : {}),
  }
}

/** An error event inside a stream (no HTTP status) of a kind that passes: overloaded, a server error, a rate limit. */
function passingStreamError(sdk: Sdk, err: unknown): boolean {
  return err instanceof sdk.APIError && !(err instanceof sdk.APIUserAbortError) && err.status === undefined && PASSING_STREAM_ERRORS.has(err.type ?? '')
}

/** The API's own words for an error (`error.message` of its body), else the SDK's. */
function apiMessage(err: InstanceType<Sdk['APIError']>): string {
  const text = typeof err.apiMessage === 'string' && err.apiMessage !== '' ? (err.type ? `${err.type}: ${err.apiMessage}` : err.apiMessage) : err.message
  return (text.split('\n')[0] ?? text).slice(0, 300)
}

/** The bound a failed request hit (in the error or its causes), if any. */
function boundHit(err: unknown): Error | null {
  for (let e = err, depth = 0; e instanceof Error && depth < 5; e = e.cause, depth++) {
    if (e instanceof ResponseTooLargeError || e instanceof ResponseTooSlowError) return e
  }
  return null
}
