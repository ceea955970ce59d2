import type { Pool } from 'pg'
import type { CommandEnv } from '../command-env.js'
import { fleetDatabaseUrl } from '../command-env.js'
import { CtxError, UsageError } from '../errors.js'
import { connectPool, pgReason } from '../storage/index/pg-pool.js'
import { migrate } from '../storage/index/pg-schema.js'

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
