/**
 * How long a process waits for the fleet's database to take its last index writes.
 * A process asked to stop (SIGINT, SIGTERM) waits no more (docs/contract.md §14.5: a stop ends
 * every wait at once): what is left is in the task directories, and `reindex` or the
 * next watch-locks pass brings PostgreSQL in step (docs/contract.md §14.3).
 */
let ended = false
const sleepers = new Set<() => void>()

/** From now on, no wait for the database (called once a stop signal has come). */
export function endIndexWaits(): void {
  ended = true
  for (const wake of sleepers) wake()
  sleepers.clear()
}

export function indexWaitsEnded(): boolean {
  return ended
}

/** Sleeps `ms`, or less when endIndexWaits() is called meanwhile. */
export function indexSleep(ms: number): Promise<void> {
  if (ended) return Promise.resolve()
  return new Promise((resolve) => {
    const wake = (): void => {
      clearTimeout(timer)
      sleepers.delete(wake)
      resolve()
    }
    const timer = setTimeout(wake, Math.max(0, ms))
    sleepers.add(wake)
  })
}
