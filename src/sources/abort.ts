import { untilAborted } from '../abort.js'

/**
 * Stopping forge calls. Neither official client takes a stop for all its requests:
 * octokit's paginate() drops `request.signal` after building the first request, and
 * @gitbeaker/rest takes no signal at all (a `signal` option becomes query parameters;
 * jdalrymple/gitbeaker#3561). So a long-lived caller (the poller) gives its stop to the
 * client's transport — every request, page and retry made by it is aborted, and no
 * socket keeps the process alive — and races each call against it, so that the clients'
 * own retry waits do not hold the caller either.
 */

/** Settles as `work` does (not started when the signal has aborted), or rejects with the signal's reason as soon as it aborts. */
export function raceAbort<T>(work: () => Promise<T>, signal: AbortSignal | undefined): Promise<T> {
  if (signal === undefined) return work()
  if (signal.aborted) return Promise.reject(signal.reason as Error)
  // A failure caused by the stop (the transport aborted too) says so by the stop's reason.
  return untilAborted(work(), signal).catch((err: unknown) => {
    throw signal.aborted ? (signal.reason as Error) : err
  })
}

/** A fetch (octokit's `request.fetch`) whose every request also ends when `stop` aborts. */
export function abortableFetch(stop: AbortSignal): typeof fetch {
  // A request with a signal of its own is rare here (the trackers pass none).
  return (input, init) => fetch(input, { ...init, signal: init?.signal ? AbortSignal.any([init.signal, stop]) : stop })
}

/**
 * Runs `work` with a signal that aborts when `stop` or `own` does. Its listeners are
 * removed when `work` settles: AbortSignal.any() would leave a record of each joined
 * signal in `stop`, which lives as long as the poller (Node 20: nodejs/node#55351).
 */
export async function withStop<T>(stop: AbortSignal, own: AbortSignal | null | undefined, work: (signal: AbortSignal) => Promise<T>): Promise<T> {
  if (!own) return work(stop)
  const joined = new AbortController()
  const onAbort = (event: Event) => joined.abort((event.target as AbortSignal).reason)
  if (stop.aborted || own.aborted) joined.abort(stop.aborted ? stop.reason : own.reason)
  stop.addEventListener('abort', onAbort, { once: true })
  own.addEventListener('abort', onAbort, { once: true })
  try {
    return await work(joined.signal)
  } finally {
    stop.removeEventListener('abort', onAbort)
    own.removeEventListener('abort', onAbort)
  }
}
