import type { Pool } from 'pg'
import { monitorPass } from '../operations/monitor.js'
import type { PassResult } from '../operations/monitor.js'
import type { TaskEnv } from '../storage/task/env.js'
import type { CommandEnv } from '../command-env.js'
import { fleetDatabaseUrl } from '../command-env.js'
import { CtxError, UsageError } from '../errors.js'
import { connectPool, pgReason } from '../storage/index/pg-pool.js'
import { migrate } from '../storage/index/pg-schema.js'
import { refusalText, withLease } from '../fleet/recovery/lease.js'
import type { LeaseName, LeaseRefusal } from '../fleet/recovery/lease.js'
import { workerLiveSeconds } from '../storage/index/worker-liveness.js'

/** The fleet's database for a fleet command: required, reachable, and migrated; else one line and nothing done. */
export async function fleetPool(ctx: CommandEnv, role: string, max = 4): Promise<{ pool: Pool; url: string }> {
  const url = fleetDatabaseUrl(ctx)
  if (url === null) throw new UsageError(`${role} needs the fleet's PostgreSQL database`, 'set fleet.database_url in the config, or CTXAGENT_DATABASE_URL')
  const pool = await connectPool(url, role, max)
  try {
    const client = await pool.connect()
    try {
      await migrate(client)
    } finally {
      client.release()
    }
  } catch (err) {
    await pool.end().catch(() => undefined)
    throw new CtxError(`cannot reach the fleet's database (${pgReason(err)})`, {
      exitCode: 1,
      hint: 'check fleet.database_url or CTXAGENT_DATABASE_URL and that the server is up',
      cause: err,
    })
  }
  return { pool, url }
}

/** The connection a worker LISTENs on (docs/contract.md §14.5): fleet.listen_url, a direct one when the database URL goes through a pooler; else the database URL. */
export function fleetListenUrl(ctx: CommandEnv, databaseUrl: string): string {
  return ctx.config.fleet.listen_url ?? databaseUrl
}

/** How a fleet-wide pass holds its lease: renewed every heartbeat, freed after the stale time if its host dies (docs/contract.md §4's clocks, on the database's clock). */
function leaseTimes(ctx: CommandEnv): { ttlSeconds: number; renewMs: number } {
  return { ttlSeconds: ctx.config.locks.stale_after_seconds, renewMs: ctx.config.locks.heartbeat_seconds * 1000 }
}

/** A pass that did not get its lease: a warning, or, refused for longer than its interval, an error (exit 1 for a single pass; the loop goes on). */
function refusedPass(ctx: CommandEnv, name: LeaseName, refusal: LeaseRefusal, once: boolean): void {
  const text = refusalText(name, refusal)
  if (!refusal.overdue) return ctx.io.warn(text)
  if (once) throw new CtxError(text, { exitCode: 1, hint: 'if that host is gone its lease expires by itself; if it is stuck, stop that pass' })
  ctx.io.err(`ctxagent: ${text}\n`)
}

export interface FleetPassOptions {
  /** How often passes come (--interval): refused its lease for longer is an alert (docs/contract.md §14.5). */
  intervalMs: number
  /** A single pass (--once, cron): refused for too long it fails (exit 1) instead of warning. */
  once: boolean
}

/** A job a fleet pass settled: what its task became, and whether its resume was queued. */
export interface SettledJob {
  job: number
  task: string
  outcome: string
  resumed: boolean
}

/** One line for a settled job, as watch-locks and cleanup print it. */
export function settledText(s: SettledJob): string {
  return `job ${s.job} (task ${s.task}): ${s.outcome}${s.resumed ? ', its resume queued' : ''}`
}

export interface FleetReapOutcome {
  /** The pass (monitorPass's result) and how many jobs it settled; all zero when another host held the lease. */
  result: PassResult & { jobs_recovered: number }
  settled: SettledJob[]
}

/** In a fleet: one pass at a time fleet-wide, dead workers' tasks recovered and their jobs settled (docs/contract.md §14.3). */
export async function fleetReapPass(
  ctx: CommandEnv,
  env: TaskEnv,
  options: Parameters<typeof monitorPass>[1],
  pass: FleetPassOptions,
): Promise<FleetReapOutcome> {
  const { fleetPass } = await import('../fleet/recovery/recovery.js')
  const { pool } = await fleetPool(ctx, 'watch-locks')
  try {
    const liveSeconds = workerLiveSeconds(ctx.config.locks)
    const lease = {
      name: 'watch-locks' as const,
      ...leaseTimes(ctx),
      intervalSeconds: pass.intervalMs / 1000,
      onLost: () => ctx.io.warn(lostText('watch-locks')),
    }
    const outcome = await withLease(pool, lease, () =>
      fleetPass(pool, ctx.layout, ctx.config, liveSeconds, (recoverAs) => monitorPass(env, { ...options, recoverAs })),
    )
    if (!outcome.ran) {
      refusedPass(ctx, 'watch-locks', outcome.refusal, pass.once)
      return { result: { checked: 0, findings: [], reindexed: 0, jobs_recovered: 0 }, settled: [] }
    }
    return { result: { ...outcome.value.result, jobs_recovered: outcome.value.settled.length }, settled: outcome.value.settled }
  } finally {
    await pool.end().catch(() => undefined)
  }
}

function lostText(what: string): string {
  return `this ${what} pass outlived its lease (it froze, or lost the database for longer than locks.stale_after_seconds) and another host may have taken it`
}

/**
 * Runs `body` holding the fleet-wide lease `name` (lease.ts: a row with an expiry, which
 * works through a pooler and frees itself when its host dies); false when another host
 * holds it (said on stderr).
 */
export async function withFleetLease(ctx: CommandEnv, name: LeaseName, pass: FleetPassOptions, body: () => Promise<void>): Promise<boolean> {
  const { pool } = await fleetPool(ctx, name, 2)
  try {
    const outcome = await withLease(
      pool,
      { name, ...leaseTimes(ctx), intervalSeconds: pass.intervalMs / 1000, onLost: () => ctx.io.warn(lostText(name)) },
      body,
    )
    if (!outcome.ran) refusedPass(ctx, name, outcome.refusal, pass.once)
    return outcome.ran
  } finally {
    await pool.end().catch(() => undefined)
  }
}
