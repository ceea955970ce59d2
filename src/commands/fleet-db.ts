import type { Pool } from 'pg'
import { monitorPass } from '../operations/monitor.js'
import type { PassResult } from '../operations/monitor.js'
import type { TaskEnv } from '../storage/task/env.js'
import type { CommandEnv } from '../command-env.js'
import { fleetDatabaseUrl } from '../command-env.js'
import { CtxError, UsageError } from '../errors.js'
import { connectPool, pgReason } from '../storage/index/pg-pool.js'
import { LOCK_KEYS, migrate } from '../storage/index/pg-schema.js'

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
    throw new CtxError(`cannot reach the fleet's database (${pgReason(err)})`, { exitCode: 1, hint: 'check fleet.database_url or CTXAGENT_DATABASE_URL and that the server is up' })
  }
  return { pool, url }
}

/** In a fleet: one pass at a time fleet-wide, dead workers' tasks recovered and their jobs settled (SPEC §14.3). */
export async function fleetReapPass(ctx: CommandEnv, env: TaskEnv, options: Parameters<typeof monitorPass>[1]): Promise<PassResult & { jobs_recovered: number }> {
  const { fleetPass } = await import('../fleet/recovery.js')
  const { pool } = await fleetPool(ctx, 'watch-locks')
  try {
    const locks = ctx.config.locks
    const liveSeconds = locks.stale_after_remote_seconds ?? 2 * locks.stale_after_seconds
    const fleet = await fleetPass(pool, ctx.layout, ctx.config, liveSeconds, (recoverAs) => monitorPass(env, { ...options, recoverAs }))
    if (fleet.skipped) ctx.io.warn('another host runs a watch-locks pass; this one was skipped')
    for (const s of fleet.settled) if (!ctx.json) ctx.io.out(`job ${s.job} (task ${s.task}): ${s.outcome}${s.resumed ? ', its resume queued' : ''}`)
    return { ...(fleet.result ?? { checked: 0, findings: [], reindexed: 0 }), jobs_recovered: fleet.settled.length }
  } finally {
    await pool.end().catch(() => undefined)
  }
}

/**
 * Runs `body` holding a fleet-wide advisory lock (a session lock on a connection of its
 * own: released when the body ends or its host dies); null when another host holds it.
 */
export async function withFleetLock<T>(ctx: CommandEnv, key: keyof typeof LOCK_KEYS, body: () => Promise<T>): Promise<T | null> {
  const { pool } = await fleetPool(ctx, key, 1)
  try {
    const client = await pool.connect()
    try {
      const got = (await client.query<{ ok: boolean }>('SELECT pg_try_advisory_lock($1) AS ok', [LOCK_KEYS[key]])).rows[0]?.ok === true
      if (!got) return null
      try {
        return await body()
      } finally {
        await client.query('SELECT pg_advisory_unlock($1)', [LOCK_KEYS[key]]).catch(() => undefined)
      }
    } finally {
      client.release()
    }
  } finally {
    await pool.end().catch(() => undefined)
  }
}
