/**
 * Stopping forge calls. Neither official client takes a stop for all its requests:
 * octokit's paginate() drops `request.signal` after building the first request, and
 * @gitbeaker/rest takes no signal at all (a `signal` option becomes query parameters;
 * jdalrymple/gitbeaker#3561). So a long-lived caller (the poller) gives its stop to the
 * client's transport — every request, page and retry made by it is aborted, and no
 * socket keeps the process alive — and races each call against it, so that the clients'
 * own retry waits do not hold the caller either.
 */

/** Settles as `work` does, or rejects with the signal's reason as soon as it aborts. */
export function raceAbort<T>(work: () => Promise<T>, signal: AbortSignal | undefined): Promise<T> {
  if (signal === undefined) return work()
  if (signal.aborted) return Promise.reject(signal.reason as Error)
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason as Error)
    signal.addEventListener('abort', onAbort, { once: true })
    work().then(
      (value) => {
        signal.removeEventListener('abort', onAbort)
        resolve(value)
      },
      (err: unknown) => {
        signal.removeEventListener('abort', onAbort)
        reject(signal.aborted ? (signal.reason as Error) : err)
      },
    )
  })
}

/** The signal of one request joined with the caller's stop. */
export function joinSignals(own: AbortSignal | null | undefined, stop: AbortSignal): AbortSignal {
  return own ? AbortSignal.any([own, stop]) : stop
}

/** A fetch (octokit's `request.fetch`) whose every request also ends when `stop` aborts. */
export function abortableFetch(stop: AbortSignal): typeof fetch {
  return (input, init) => fetch(input, { ...init, signal: joinSignals(init?.signal, stop) })
}
