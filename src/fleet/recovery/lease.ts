import { randomUUID } from 'node:crypto'
import { hostname } from 'node:os'
import type { Pool } from 'pg'

/** The fleet-wide passes that never overlap (docs/contract.md §14.3). */
export type LeaseName = 'watch-locks' | 'cleanup'

export interface LeaseOptions {
  name: LeaseName
  /** How long a lease lives unless renewed: a holder that died frees it after this. */
  ttlSeconds: number
  /** How often the holder renews it while its pass runs. */
  renewMs: number
  /** How often passes come: refused for longer than this is an alert (docs/contract.md §14.5). */
  intervalSeconds: number
  /** Called once when a renewal finds the lease taken by another holder (this one froze past its expiry). */
  onLost?: () => void
}

/** Why a pass did not run: who holds the lease, and since when passes have been refused it. */
export interface LeaseRefusal {
  holder: string
  taken_at: string
  expires_at: string
  /** Seconds since the first refusal after the last pass that ran. */
  denied_seconds: number
  /** Refused for longer than the interval: no pass has run for too long. */
  overdue: boolean
}

export type LeaseOutcome<T> = { ran: true; value: T } | { ran: false; refusal: LeaseRefusal }

/**
 * Runs `body` holding the lease `name`: a row in fleet_leases with an expiry, taken in
 * one statement (only when free or expired) and renewed while the body runs. Every
 * statement stands alone, so that the lease works through a pooler in transaction mode
 * (a session advisory lock would stay on whichever pooled connection took it), and a
 * holder that dies or is cut off frees it when it expires (docs/contract.md §14.5).
 */
export async function withLease<T>(pool: Pool, options: LeaseOptions, body: () => Promise<T>): Promise<LeaseOutcome<T>> {
  const holder = `${hostname()}:${process.pid}:${randomUUID().slice(0, 8)}`
  const taken = await pool.query(
    `INSERT INTO fleet_leases AS l (name, holder, taken_at, expires_at) VALUES ($1, $2, now(), now() + make_interval(secs => $3))
     ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, taken_at = excluded.taken_at, expires_at = excluded.expires_at
     WHERE l.expires_at <= now()`,
    [options.name, holder, options.ttlSeconds],
  )
  if (taken.rowCount !== 1) return { ran: false, refusal: await refused(pool, options) }
  let lost = false
  const renew = setInterval(() => {
    void pool
      .query('UPDATE fleet_leases SET expires_at = now() + make_interval(secs => $3) WHERE name = $1 AND holder = $2', [
        options.name,
        holder,
        options.ttlSeconds,
      ])
      .then((r) => {
        if (r.rowCount === 0 && !lost) {
          lost = true
          options.onLost?.()
        }
      })
      // The database away: the next renewal tries again (the lease may expire meanwhile, as it should).
      .catch(() => undefined)
  }, options.renewMs)
  try {
    return { ran: true, value: await body() }
  } finally {
    clearInterval(renew)
    // Released at once, and the refusals before it forgotten: a pass has run.
    await pool
      .query('UPDATE fleet_leases SET expires_at = now(), done_at = now(), denied_since = NULL, denied_interval = NULL WHERE name = $1 AND holder = $2', [
        options.name,
        holder,
      ])
      .catch(() => undefined)
  }
}

/** Records a refusal (the first since the last pass starts the count) and says who holds the lease. */
async function refused(pool: Pool, options: LeaseOptions): Promise<LeaseRefusal> {
  const result = await pool.query<Record<string, unknown>>(
    `UPDATE fleet_leases SET denied_since = COALESCE(denied_since, now()), denied_interval = $2 WHERE name = $1
     RETURNING holder, taken_at, expires_at, extract(epoch FROM now() - denied_since)::float AS denied_seconds`,
    [options.name, options.intervalSeconds],
  )
  const row = result.rows[0] ?? {}
  const denied = Number(row.denied_seconds ?? 0)
  return {
    holder: String(row.holder ?? 'unknown'),
    taken_at: iso(row.taken_at),
    expires_at: iso(row.expires_at),
    denied_seconds: denied,
    overdue: denied > options.intervalSeconds,
  }
}

function iso(value: unknown): string {
  return value instanceof Date ? value.toISOString() : String(value ?? '')
}

/** One line for a refused pass: plain while passes still come in time, loud once none has run for longer than its interval. */
export function refusalText(name: LeaseName, refusal: LeaseRefusal): string {
  if (!refusal.overdue) return `another host runs ${name === 'cleanup' ? 'cleanup' : 'a watch-locks pass'} (${refusal.holder}); this one was skipped`
  return `no ${name} pass has run for ${Math.round(refusal.denied_seconds)} s, longer than its interval: each is refused the fleet-wide lease, held by ${refusal.holder} since ${refusal.taken_at} (renewed until ${refusal.expires_at})`
}

export interface LeaseAlert {
  level: 'warning' | 'critical'
  metric: 'pass_lease'
  value: number
  threshold: number
  message: string
}

/**
 * `stats --check` in a fleet: a pass refused its lease for longer than its interval.
 * watch-locks refused is critical (no dead agent is recovered fleet-wide), cleanup a warning.
 */
export async function leaseAlerts(pool: Pool): Promise<LeaseAlert[]> {
  const result = await pool.query<Record<string, unknown>>(
    `SELECT name, holder, extract(epoch FROM now() - denied_since)::float AS denied_seconds, denied_interval
     FROM fleet_leases WHERE denied_since IS NOT NULL AND now() - denied_since > make_interval(secs => denied_interval) ORDER BY name`,
  )
  return result.rows.map((r) => {
    const denied = Number(r.denied_seconds)
    const name = String(r.name)
    return {
      level: name === 'watch-locks' ? ('critical' as const) : ('warning' as const),
      metric: 'pass_lease' as const,
      value: Math.round(denied),
      threshold: Number(r.denied_interval),
      message: `no ${name} pass has run for ${Math.round(denied)} s (> its interval of ${Number(r.denied_interval)} s): its fleet-wide lease is held by ${String(r.holder)}`,
    }
  })
}
