import http from 'node:http'
import https from 'node:https'
import zlib from 'node:zlib'
import { grouped } from '../text.js'
import type { ProviderWait } from './client.js'
import { markUsageLimit } from './usage-limit.js'

/**
 * A fetch for the OpenAI SDK that bounds the whole exchange, not just the wait for
 * headers (the SDK's `timeout` ends when the headers arrive: one byte every few
 * seconds kept a request alive for good, and a 1.5 GB body was read into memory):
 *
 * - total time: headers and body within `totalMs`;
 * - body size: at most `maxBytes`, else the request fails;
 * - a server-chosen wait (`Retry-After`, `retry-after-ms`) longer than `maxRetryWaitMs`
 *   is cut to it: the SDK honours whatever the server says, an hour included;
 * - the wait before a retry is made here, at the start of the retry, and ends when the
 *   request's signal aborts: the SDK's own sleep between retries listens to nothing,
 *   and its timer kept a stopped process alive for the whole wait (docs/contract.md §12.3: a stop
 *   ends every wait). The SDK is told to wait 0 ms (`retry-after-ms: 0`).
 */
export interface FetchBounds {
  totalMs: number
  maxBytes: number
  maxRetryWaitMs: number
  /** Told of every wait before a retry as it is decided (docs/running.md#waits). */
  onWait?: (wait: ProviderWait) => void
  /** The SDK's maxRetries: an answer to its last try is not retried, so no wait is owed or told. */
  maxRetries?: number
}

export class ResponseTooLargeError extends Error {}

/**
 * A response whose body is already in memory, read by the SDK without a web stream:
 * `new Response(bytes)` wraps them in a ReadableStream that `json()` then drains,
 * decodes and parses (a few hundred microseconds a request, most of them before the
 * JIT has warmed up). `body` still gives a stream to whoever asks for one.
 */
class BufferedResponse extends (Response as new (body: null, init: ResponseInit) => Omit<Response, 'body' | 'text' | 'json' | 'arrayBuffer'>) {
  readonly #bytes: Buffer | null

  constructor(bytes: Buffer | null, init: ResponseInit) {
    super(null, init)
    this.#bytes = bytes
  }

  get body(): ReadableStream<Uint8Array> | null {
    const bytes = this.#bytes
    return bytes === null ? null : new ReadableStream({ start: (c) => (c.enqueue(new Uint8Array(bytes)), c.close()) })
  }

  async text(): Promise<string> {
    const text = this.#bytes === null ? '' : this.#bytes.toString('utf8')
    // As fetch decodes: a byte order mark is not part of the text.
    return text.charCodeAt(0) === 0xfeff ? text.slice(1) : text
  }

  async json(): Promise<unknown> {
    return JSON.parse(await this.text())
  }

  async arrayBuffer(): Promise<ArrayBuffer> {
    const bytes = this.#bytes ?? Buffer.alloc(0)
    return bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength) as ArrayBuffer
  }
}
export class ResponseTooSlowError extends Error {}

export function boundedFetch(bounds: FetchBounds): typeof fetch {
  const viaFetch = boundedGlobalFetch(bounds)
  const send: typeof fetch = (input, init = {}) => {
    const url = typeof input === 'string' ? input : input instanceof URL ? input.href : null
    const body = init.body
    // What the client sends (a request of bytes, or none) goes the short way; anything else through fetch.
    if (url === null || !/^https?:/i.test(url) || !(body === undefined || body === null || body instanceof Uint8Array || typeof body === 'string'))
      return viaFetch(input, init)
    // fetch follows a redirect with a body of text only (bytes it cannot send twice): the JSON as text.
    return httpExchange(url, init, body ?? null, bounds, () =>
      viaFetch(input, body instanceof Uint8Array ? { ...init, body: Buffer.from(body.buffer, body.byteOffset, body.byteLength).toString() } : init),
    )
  }
  // The wait owed before a request's retry, by its body (the SDK sends the same one again); a body of text shares one slot.
  const waits = new WeakMap<object, number>()
  const textBodies = {}
  return async (input, init = {}) => {
    const key = typeof init.body === 'object' && init.body !== null ? init.body : textBodies
    const retry = Number(new Headers(init.headers).get('x-stainless-retry-count') ?? 0)
    const owed = retry > 0 ? (waits.get(key) ?? 0) : 0
    waits.delete(key)
    if (owed > 0) await abortableWait(owed, init.signal ?? undefined)
    const res = await send(input, init)
    if (willRetry(res) && (bounds.maxRetries === undefined || retry < bounds.maxRetries)) {
      const wait = retryWait(res.headers, retry, bounds.maxRetryWaitMs)
      waits.set(key, wait.ms)
      bounds.onWait?.({ ...wait, retry: retry + 1, status: res.status })
      res.headers.delete('retry-after')
      res.headers.set('retry-after-ms', '0')
    }
    return res
  }
}

/**
 * How long the SDK may take over one try, its wait before it included (the SDK's
 * `timeout`; the exchange itself is bounded by `totalMs` here): the wait is not
 * taken for a request that timed out.
 */
export function sdkTimeoutMs(bounds: FetchBounds): number {
  return bounds.totalMs + bounds.maxRetryWaitMs
}

/** The answers the SDK retries (its shouldRetry). */
function willRetry(res: Response): boolean {
  const told = res.headers.get('x-should-retry')
  if (told === 'true' || told === 'false') return told === 'true'
  return res.status === 408 || res.status === 409 || res.status === 429 || res.status >= 500
}

/**
 * The wait before a retry and why. A server's wait (`retry-after-ms`, `Retry-After` in
 * seconds or as a date) is taken up to the limit; one that asks for no wait (0, a negative
 * number, a date gone by) or cannot be read leaves the client's own backoff, as no header
 * would (docs/running.md#rate-limits).
 */
function retryWait(headers: Headers, retried: number, maxMs: number): { ms: number; reason: string } {
  const millis = headers.get('retry-after-ms')
  const seconds = headers.get('retry-after')
  const asked = millis !== null ? `retry-after-ms: ${millis}` : seconds !== null ? `Retry-After: ${seconds}` : headers.get(NO_WAIT_HEADER)
  let ms = millis !== null ? Number.parseFloat(millis) : seconds !== null ? Number.parseFloat(seconds) * 1000 : Number.NaN
  if (Number.isNaN(ms) && seconds !== null && millis === null) ms = Date.parse(seconds) - Date.now()
  if (asked !== null && ms > 0)
    return { ms: Math.min(ms, maxMs), reason: `the server asked (${clip(asked)})${ms > maxMs ? ', cut to llm.max_retry_wait' : ''}` }
  const backoff = `the client's backoff${asked === null ? '' : ` (${clip(asked)}: no wait to honour)`}`
  return { ms: backoffMs(retried, maxMs), reason: backoff }
}

/** A Retry-After that asked for no wait, as the server wrote it (clampRetryAfter took it off the response). */
const NO_WAIT_HEADER = 'x-ctxagent-retry-after-ignored'

const clip = (text: string): string => (text.length > 80 ? `${text.slice(0, 80)}…` : text)

/** The SDK's own backoff (0.5 s doubling to 8 s, less up to a quarter of jitter), within the limit. */
function backoffMs(retried: number, maxMs: number): number {
  return Math.min(Math.min(0.5 * 2 ** retried, 8) * (1 - Math.random() * 0.25) * 1000, maxMs)
}

function abortableWait(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason)
    const onAbort = (): void => {
      clearTimeout(timer)
      reject(signal?.reason)
    }
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort)
      resolve()
    }, ms)
    signal?.addEventListener('abort', onAbort, { once: true })
  })
}

const AGENTS = { 'http:': new http.Agent({ keepAlive: true }), 'https:': new https.Agent({ keepAlive: true }) }

/**
 * One request through node:http(s), the body written as it is (fetch copies it, and
 * wraps it and the answer in web streams: about a millisecond a request of 200 KB), the
 * answer read whole within the bounds and handed over as a Response. Everything the SDK
 * sees is as with fetch: a failure to connect is a TypeError('fetch failed') with the
 * cause, an abort rejects with the signal's reason, a bound hit after the headers fails
 * the body. A redirect is left to fetch (`redirected`).
 */
function httpExchange(
  url: string,
  init: RequestInit,
  body: Uint8Array | string | null,
  bounds: FetchBounds,
  redirected: () => Promise<Response>,
): Promise<Response> {
  return new Promise<Response>((resolve, reject) => {
    const target = new URL(url)
    const signal = init.signal ?? undefined
    if (signal?.aborted) return reject(signal.reason)
    const headers: Record<string, string> = {}
    // The SDK passes a Headers already: read, not copied.
    ;(init.headers instanceof Headers ? init.headers : new Headers(init.headers)).forEach((value, name) => (headers[name] = value))
    if (body !== null) headers['content-length'] = String(typeof body === 'string' ? Buffer.byteLength(body) : body.byteLength)
    let settled = false
    let response: http.IncomingMessage | null = null
    const finish = (outcome: () => void) => {
      if (settled) return
      settled = true
      clearTimeout(timer)
      signal?.removeEventListener('abort', onAbort)
      outcome()
    }
    // After the headers a failure fails the body (the SDK reads it), before them the request.
    const fail = (err: unknown, head?: http.IncomingMessage) => {
      if (settled) return
      req.destroy()
      finish(() =>
        head
          ? resolve(
              new Response(failingBody(err), { status: head.statusCode ?? 500, statusText: head.statusMessage ?? '', headers: responseHeaders(head, bounds) }),
            )
          : reject(err),
      )
    }
    const onAbort = () => fail(signal?.reason)
    signal?.addEventListener('abort', onAbort, { once: true })
    const timer = setTimeout(
      () => fail(new ResponseTooSlowError(`the response was not complete within ${Math.round(bounds.totalMs / 1000)}s`), response ?? undefined),
      bounds.totalMs,
    )
    timer.unref()
    const req = (target.protocol === 'https:' ? https : http).request(
      target,
      { method: init.method ?? 'GET', headers, agent: AGENTS[target.protocol as 'http:' | 'https:'] },
      (res) => {
        response = res
        const status = res.statusCode ?? 500
        if (status >= 300 && status < 400 && res.headers.location !== undefined) {
          res.resume()
          return finish(() => redirected().then(resolve, reject))
        }
        const chunks: Buffer[] = []
        let bytes = 0
        const stream = decoded(res)
        stream.on('data', (chunk: Buffer) => {
          bytes += chunk.length
          if (bytes > bounds.maxBytes) return fail(new ResponseTooLargeError(`the response is over ${grouped(bounds.maxBytes)} bytes`), res)
          chunks.push(chunk)
        })
        stream.on('error', (err) => fail(new TypeError('terminated', { cause: err }), res))
        res.on('aborted', () => fail(new TypeError('terminated'), res))
        stream.on('end', () =>
          finish(() =>
            resolve(
              new BufferedResponse(status === 204 || status === 304 ? null : Buffer.concat(chunks, bytes), {
                status,
                statusText: res.statusMessage ?? '',
                headers: responseHeaders(res, bounds),
              }) as unknown as Response,
            ),
          ),
        )
      },
    )
    req.on('error', (err) =>
      fail(response === null ? new TypeError('fetch failed', { cause: err }) : new TypeError('terminated', { cause: err }), response ?? undefined),
    )
    req.end(body ?? undefined)
  })
}

/** The body as the server meant it: gzip, deflate and br undone, as fetch does. */
function decoded(res: http.IncomingMessage): NodeJS.ReadableStream {
  const encoding = (res.headers['content-encoding'] ?? '').trim().toLowerCase()
  if (encoding === 'gzip' || encoding === 'x-gzip') return res.pipe(zlib.createGunzip())
  if (encoding === 'deflate') return res.pipe(zlib.createInflate())
  if (encoding === 'br') return res.pipe(zlib.createBrotliDecompress())
  return res
}

function responseHeaders(res: http.IncomingMessage, bounds: FetchBounds): Headers {
  const headers = new Headers()
  const raw = res.rawHeaders
  for (let i = 0; i + 1 < raw.length; i += 2) headers.append(raw[i] as string, raw[i + 1] as string)
  if (headers.has('content-encoding')) {
    headers.delete('content-encoding')
    headers.delete('content-length')
  }
  // A usage limit beyond the longest wait is not retried: it is the caller's to wait out (usage-limit.ts).
  markUsageLimit(res.statusCode ?? 500, headers, bounds.maxRetryWaitMs)
  return clampRetryAfter(headers, bounds.maxRetryWaitMs)
}

function failingBody(err: unknown): ReadableStream<Uint8Array> {
  return new ReadableStream({ start: (controller) => controller.error(err) })
}

/** The same bounds around the platform's fetch (bodies of other kinds, redirects). */
function boundedGlobalFetch(bounds: FetchBounds): typeof fetch {
  return async (input, init = {}) => {
    const ac = new AbortController()
    const outer = init.signal ?? undefined
    const onAbort = () => ac.abort(outer?.reason)
    if (outer?.aborted) ac.abort(outer.reason)
    else outer?.addEventListener('abort', onAbort, { once: true })
    const timer = setTimeout(
      () => ac.abort(new ResponseTooSlowError(`the response was not complete within ${Math.round(bounds.totalMs / 1000)}s`)),
      bounds.totalMs,
    )
    timer.unref()
    const done = () => {
      clearTimeout(timer)
      outer?.removeEventListener('abort', onAbort)
    }
    let res: Response
    try {
      res = await fetch(input, { ...init, signal: ac.signal })
    } catch (err) {
      done()
      throw ac.signal.reason instanceof ResponseTooSlowError ? ac.signal.reason : err
    }
    const raw = new Headers(res.headers)
    markUsageLimit(res.status, raw, bounds.maxRetryWaitMs)
    const headers = clampRetryAfter(raw, bounds.maxRetryWaitMs)
    if (res.body === null) {
      done()
      return new Response(null, { status: res.status, statusText: res.statusText, headers })
    }
    let bytes = 0
    const counted = res.body.pipeThrough(
      new TransformStream<Uint8Array, Uint8Array>({
        transform(chunk, controller) {
          bytes += chunk.byteLength
          if (bytes > bounds.maxBytes) {
            const err = new ResponseTooLargeError(`the response is over ${grouped(bounds.maxBytes)} bytes`)
            ac.abort(err)
            controller.error(err)
            return
          }
          controller.enqueue(chunk)
        },
        flush: done,
      }),
      { signal: ac.signal },
    )
    return new Response(counted, { status: res.status, statusText: res.statusText, headers })
  }
}

/** Retry-After (seconds or a date) and retry-after-ms over the limit become the limit. */
function clampRetryAfter(headers: Headers, maxMs: number): Headers {
  const seconds = headers.get('retry-after')
  const millis = headers.get('retry-after-ms')
  if (seconds === null && millis === null) return headers
  let ms = millis !== null ? Number.parseFloat(millis) : Number.parseFloat(seconds as string) * 1000
  if (Number.isNaN(ms) && seconds !== null) ms = Date.parse(seconds) - Date.now()
  if (ms >= 0 && ms <= maxMs) return headers
  // No wait asked for (a negative number, a date gone by) or none readable: the client's own backoff, as with no
  // header (the SDK would take an unreadable one as its longest wait); what was asked is kept for the log.
  if (ms < 0 || Number.isNaN(ms)) {
    headers.set(NO_WAIT_HEADER, millis !== null ? `retry-after-ms: ${millis}` : `Retry-After: ${seconds}`)
    headers.delete('retry-after')
    headers.delete('retry-after-ms')
    return headers
  }
  // A longer wait of a 429 or 529 is a usage limit, already marked (markUsageLimit): the caller waits it out, not the SDK.
  headers.delete('retry-after')
  headers.set('retry-after-ms', String(maxMs))
  return headers
}
