/**
 * `promise`, or a rejection with `reason()` (by default the signal's reason) as soon as
 * `signal` aborts: for clients that do not honour a signal in all their waits (the openai
 * SDK between retries, the forges' clients). The promise is left to settle unseen but
 * observed: a rejection nobody handles would end the process (a task stopped during its
 * compaction died so, left in running/).
 */
export function untilAborted<T>(promise: Promise<T>, signal: AbortSignal, reason: () => unknown = () => signal.reason): Promise<T> {
  if (signal.aborted) {
    promise.catch(() => undefined)
    return Promise.reject(reason())
  }
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(reason())
    signal.addEventListener('abort', onAbort, { once: true })
    promise.then(
      (value) => (signal.removeEventListener('abort', onAbort), resolve(value)),
      (err: unknown) => (signal.removeEventListener('abort', onAbort), reject(err)),
    )
  })
}
