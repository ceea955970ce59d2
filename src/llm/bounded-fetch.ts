/**
 * A fetch for the OpenAI SDK that bounds the whole exchange, not just the wait for
 * headers (the SDK's `timeout` ends when the headers arrive: one byte every few
 * seconds kept a request alive for good, and a 1.5 GB body was read into memory):
 *
 * - total time: headers and body within `totalMs`;
 * - body size: at most `maxBytes`, else the request fails;
 * - a server-chosen wait (`Retry-After`, `retry-after-ms`) longer than `maxRetryWaitMs`
 *   is cut to it: the SDK honours whatever the server says, an hour included.
 */
export interface FetchBounds {
  totalMs: number
  maxBytes: number
  maxRetryWaitMs: number
}

export class ResponseTooLargeError extends Error {}
export class ResponseTooSlowError extends Error {}

export function boundedFetch(bounds: FetchBounds): typeof fetch {
  return async (input, init = {}) => {
    const ac = new AbortController()
    const outer = init.signal ?? undefined
    const onAbort = () => ac.abort(outer?.reason)
    if (outer?.aborted) ac.abort(outer.reason)
    else outer?.addEventListener('abort', onAbort, { once: true })
    const timer = setTimeout(() => ac.abort(new ResponseTooSlowError(`the response was not complete within ${Math.round(bounds.totalMs / 1000)}s`)), bounds.totalMs)
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
    const headers = clampRetryAfter(new Headers(res.headers), bounds.maxRetryWaitMs)
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
            const err = new ResponseTooLargeError(`the response is over ${bounds.maxBytes.toLocaleString('en-US')} bytes`)
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
  headers.delete('retry-after')
  headers.set('retry-after-ms', String(maxMs))
  return headers
}
