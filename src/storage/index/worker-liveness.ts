import type { Config } from '../../config/schema.js'

/**
 * The one rule of "is this worker alive" (docs/contract.md §4, §14.5): not stopped, and its
 * heartbeat younger than a remote lock's stale time — `locks.stale_after_remote_seconds`,
 * else twice the local one. `ctxagent fleet`, the page, doctor, cleanup, the recovery pass and
 * a worker's registration all count with it, so a worker is never live for one and dead for another.
 */
export function workerLiveSeconds(locks: Config['locks']): number {
  return locks.stale_after_remote_seconds ?? 2 * locks.stale_after_seconds
}

/** The rule in SQL: the `fleet_workers` row `w` is a live worker, `secs` the parameter that holds workerLiveSeconds (`$1`). */
export function liveWorkerSql(w: string, secs: string): string {
  return `(${w}.stopped_at IS NULL AND ${w}.heartbeat_at > now() - make_interval(secs => ${secs}))`
}
