import { Command } from 'commander'
import type { Pool } from 'pg'
import type { CommandEnv } from '../../command-env.js'
import { fleetDatabaseUrl } from '../../command-env.js'
import { isPostgresUrl } from '../../config/urls.js'
import { CtxError, UsageError } from '../../errors.js'
import { connectPool, pgReason } from '../../storage/index/pg-pool.js'
import { migrate, SCHEMA_VERSION } from '../../storage/index/pg-schema.js'
import { withEnv } from '../../command-kit/shared.js'

interface InitOptions {
  databaseUrl?: string
}

/** One right the fleet needs of its role, and whether it has it. */
interface RightCheck {
  right: string
  ok: boolean
  /** What is missing and how to grant it; '' when ok (the JSON report carries failure text only where a check failed). */
  detail: string
}

export interface InitReport {
  schema_version: number
  /** The version found before (0: no schema yet). */
  was: number
  rights: RightCheck[]
}

/** Tables the fleet reads and writes on every host (docs/contract.md §14.1). */
const TABLES = [
  'tasks',
  'fleet_jobs',
  'fleet_workers',
  'fleet_polled',
  'fleet_reviews',
  'fleet_leases',
  'fleet_idle',
  'fleet_job_attempts',
  'fleet_queue_waits',
  'fleet_counters',
  'ctxagent_schema',
]

export function fleetInitCommand(): Command {
  return new Command('init')
    .description(
      "create or migrate the fleet's schema in PostgreSQL and check that the role has the rights the fleet needs (create tables, use them, LISTEN, NOTIFY)",
    )
    .option('--database-url <url>', 'the database (default: fleet.database_url or CTXAGENT_DATABASE_URL)')
    .action(withEnv(init))
}

async function init(ctx: CommandEnv, opts: InitOptions): Promise<void> {
  const url = opts.databaseUrl ?? fleetDatabaseUrl(ctx)
  if (url === null)
    throw new UsageError('fleet init needs the database', 'pass --database-url postgres://…, or set fleet.database_url or CTXAGENT_DATABASE_URL')
  if (!isPostgresUrl(url)) throw new UsageError('--database-url is not a PostgreSQL URL', 'give one like postgres://ctxagent@db.example.com:5432/ctxagent')
  const pool = await connectPool(url, 'fleet init', 2)
  try {
    const report = await initialize(pool, ctx.config.fleet.listen_url ?? url)
    if (ctx.json) ctx.io.json(report)
    else {
      ctx.io.out(
        report.was === report.schema_version
          ? `schema version ${report.schema_version}: up to date`
          : `schema version ${report.schema_version} (was ${report.was === 0 ? 'none' : report.was})`,
      )
      for (const r of report.rights) ctx.io.out(`${r.ok ? 'ok' : 'missing'}: ${r.ok ? r.right : r.detail}`)
    }
    const missing = report.rights.filter((r) => !r.ok)
    if (missing.length > 0)
      throw new CtxError(`the role lacks ${missing.length} right(s) the fleet needs: ${missing.map((r) => r.right).join(', ')}`, {
        hint: 'grant them (listed above) and run ctxagent fleet init again',
      })
  } finally {
    await pool.end().catch(() => undefined)
  }
}

/** Migrates (when the role may create tables), then checks each right on the tables as they are. */
async function initialize(pool: Pool, listenUrl: string): Promise<InitReport> {
  let was: number
  let who: { user: string; db: string; create: boolean }
  try {
    who = (
      await pool.query<{ user: string; db: string; create: boolean }>(
        `SELECT current_user AS user, current_database() AS db, has_schema_privilege(current_schema(), 'CREATE') AS create`,
      )
    ).rows[0] as { user: string; db: string; create: boolean }
    was = await schemaVersion(pool)
  } catch (err) {
    throw new CtxError(`cannot reach the fleet's database (${pgReason(err)})`, {
      hint: 'check the URL, that the server is up, and that the role may connect to the database',
    })
  }
  const rights: RightCheck[] = []
  const grant = `GRANT CREATE ON SCHEMA public TO ${who.user}, or create the database with OWNER ${who.user}`
  if (was < SCHEMA_VERSION) {
    rights.push({
      right: 'create tables',
      ok: who.create,
      detail: who.create ? '' : `create tables: role ${who.user} may not create tables in database ${who.db} (${grant})`,
    })
    if (who.create) {
      const client = await pool.connect()
      try {
        await migrate(client)
      } catch (err) {
        throw new CtxError(`the schema could not be created (${pgReason(err)})`, { hint: grant })
      } finally {
        client.release()
      }
    }
  }
  const version = await schemaVersion(pool)
  for (const table of TABLES) {
    const exists = (await pool.query<{ ok: boolean }>('SELECT to_regclass($1) IS NOT NULL AS ok', [table])).rows[0]?.ok === true
    if (!exists) continue
    const ok = (await pool.query<{ ok: boolean }>(`SELECT has_table_privilege($1, 'SELECT, INSERT, UPDATE, DELETE') AS ok`, [table])).rows[0]?.ok === true
    if (!ok)
      rights.push({
        right: `use table ${table}`,
        ok,
        detail: `use table ${table}: role ${who.user} may not read and write it (GRANT SELECT, INSERT, UPDATE, DELETE ON ${table} TO ${who.user})`,
      })
  }
  if (version > 0 && rights.every((r) => r.ok)) rights.push({ right: 'use the tables', ok: true, detail: '' })
  rights.push(...(await notifyChecks(pool, listenUrl)))
  return { schema_version: version, was, rights }
}

async function schemaVersion(pool: Pool): Promise<number> {
  try {
    return Number((await pool.query<{ version: number }>('SELECT max(version) AS version FROM ctxagent_schema')).rows[0]?.version ?? 0)
  } catch (err) {
    if ((err as { code?: string }).code === '42P01') return 0
    throw err
  }
}

/**
 * LISTEN on the listen connection and NOTIFY through the pool, and the notification
 * seen arriving: a pooler in transaction mode between them (LISTEN on a pooled
 * connection) loses it, which is what fleet.listen_url is for (docs/contract.md §14.5).
 */
async function notifyChecks(pool: Pool, listenUrl: string): Promise<RightCheck[]> {
  const { default: pg } = await import('pg')
  const channel = `ctxagent_init_${process.pid}`
  const listener = new pg.Client({ connectionString: listenUrl, connectionTimeoutMillis: 5_000, application_name: 'ctxagent fleet init listen' })
  listener.on('error', () => undefined)
  const checks: RightCheck[] = []
  try {
    await listener.connect()
    await listener.query(`LISTEN ${channel}`)
    checks.push({ right: 'LISTEN', ok: true, detail: '' })
  } catch (err) {
    await listener.end().catch(() => undefined)
    return [{ right: 'LISTEN', ok: false, detail: `LISTEN: ${pgReason(err)} (fleet.listen_url, or the database URL, must reach PostgreSQL directly)` }]
  }
  try {
    const arrived = new Promise<boolean>((resolve) => {
      const timer = setTimeout(() => resolve(false), 5_000)
      listener.on('notification', (n) => {
        if (n.channel !== channel) return
        clearTimeout(timer)
        resolve(true)
      })
    })
    try {
      await pool.query('SELECT pg_notify($1, $2)', [channel, 'init'])
    } catch (err) {
      checks.push({ right: 'NOTIFY', ok: false, detail: `NOTIFY: ${pgReason(err)}` })
      return checks
    }
    checks.push({ right: 'NOTIFY', ok: true, detail: '' })
    const ok = await arrived
    checks.push({
      right: 'wake-ups',
      ok,
      detail: ok
        ? ''
        : 'wake-ups: a NOTIFY did not reach the LISTEN connection within 5 s (behind a pooler in transaction mode, set fleet.listen_url to a direct connection)',
    })
    return checks
  } finally {
    await listener.end().catch(() => undefined)
  }
}
