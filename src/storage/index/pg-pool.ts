import { hostname } from 'node:os'
import type { Pool, PoolClient } from 'pg'

/**
 * A pool on the fleet's database. `pg` is loaded here, on first use, so that a host
 * without a database URL never pays for it. Every pool has an error listener: an idle
 * connection whose server went away must not kill the process (it is dropped, and the
 * next query connects again).
 */
export async function connectPool(url: string, role: string, max = 4, connectTimeoutMs = 5_000): Promise<Pool> {
  const { default: pg } = await import('pg')
  const pool = new pg.Pool({
    connectionString: url,
    max,
    connectionTimeoutMillis: connectTimeoutMs,
    idleTimeoutMillis: 30_000,
    keepAlive: true,
    application_name: `ctxagent ${role} ${hostname()}:${process.pid}`.slice(0, 63),
  })
  // A server that goes away errors every client. An idle one reports to the pool; one
  // checked out (a held advisory lock, a heartbeat between queries) would emit 'error'
  // with no listener and end the process: each client gets its own listener, and the
  // failure reaches whoever uses it next through the query's promise.
  pool.on('error', () => undefined)
  pool.on('connect', (client) => void client.on('error', () => undefined))
  return pool
}

/** A one-line reason from a pg or network error, never the URL (it may hold a password). */
export function pgReason(err: unknown): string {
  const e = err as { code?: string; message?: string }
  const message = (e.message ?? String(err)).replace(/postgres(ql)?:\/\/\S+/gi, 'the database URL')
  return e.code !== undefined && !message.includes(e.code) ? `${message} [${e.code}]` : message
}

/**
 * How long a transaction may sit between two statements before the server ends its session.
 * Ours send their statements back to back; one left idle is a process frozen (SIGSTOP, a
 * paused VM) or cut off mid-transaction, and the rows it locked would stop every other
 * worker's and pass's writes to them for as long as it stays so. SET LOCAL: it holds through
 * a pooler in transaction mode, where startup options do not.
 */
export const IDLE_IN_TRANSACTION_SECONDS = 15

/** `body` in one transaction on a pooled client: committed when it returns, rolled back when it throws. */
export async function inTransaction<T>(pool: Pool, body: (client: PoolClient) => Promise<T>): Promise<T> {
  const client = await pool.connect()
  try {
    await client.query(`BEGIN; SET LOCAL idle_in_transaction_session_timeout = '${IDLE_IN_TRANSACTION_SECONDS}s'`)
    const result = await body(client)
    await client.query('COMMIT')
    return result
  } catch (err) {
    await client.query('ROLLBACK').catch(() => undefined)
    throw err
  } finally {
    client.release()
  }
}

/**
 * Whether an error of connecting or of a query may pass by itself (the server down,
 * starting, restarting, out of connections, the network): waited out with backoff. A
 * refusal that stays until someone acts (a wrong password, no such database, a missing
 * right) is not: retrying it would only hide it.
 */
export function isTransientPgError(err: unknown): boolean {
  const code = (err as { code?: unknown }).code
  // No SQLSTATE: a socket error (ECONNREFUSED, ETIMEDOUT, …) or a connection that ended.
  if (typeof code !== 'string' || !/^[0-9A-Z]{5}$/.test(code)) return true
  // 08 connection exception, 53 insufficient resources, 57 operator intervention (shutdown, starting up), 58 system error.
  return ['08', '53', '57', '58'].includes(code.slice(0, 2))
}
