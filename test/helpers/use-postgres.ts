import pg from 'pg'
import { afterAll, beforeAll, beforeEach } from 'vitest'
import { migrate } from '../../src/storage/index/pg-schema.js'
import { queryRows, startPostgres } from './postgres.js'
import type { PgServer } from './postgres.js'

/** The PostgreSQL server of one test file, and what its tests do with it. */
export interface TestDatabase {
  /** The server (kill, restart); only inside a test or a hook. */
  readonly server: PgServer
  /** Rows of one query on a connection of its own. */
  query<T extends pg.QueryResultRow>(sql: string, params?: unknown[]): Promise<T[]>
  /** The environment that points a ctxagent command at this database. */
  env(): { CTXAGENT_DATABASE_URL: string }
}

export interface UsePostgresOptions {
  /** Create the fleet's schema before the first test (a test reads a table before any command has made it). */
  schema?: boolean
  /** Tables emptied before each test, those of them that exist. */
  truncate?: string[]
}

/**
 * Starts a server for the test file that calls this at its top level (before its tests),
 * stops it after them, and empties `truncate` before each test.
 */
export function usePostgres(options: UsePostgresOptions = {}): TestDatabase {
  let started: PgServer | undefined
  const server = (): PgServer => {
    if (started === undefined) throw new Error('usePostgres: its server is started in beforeAll; use it inside a test or a hook')
    return started
  }
  const query = <T extends pg.QueryResultRow>(sql: string, params: unknown[] = []): Promise<T[]> => queryRows<T>(server().url, sql, params)
  beforeAll(async () => {
    started = await startPostgres()
    if (options.schema === true) {
      const pool = new pg.Pool({ connectionString: started.url, max: 1 })
      const client = await pool.connect()
      await migrate(client).finally(() => (client.release(), pool.end()))
    }
  })
  afterAll(async () => {
    await started?.stop()
  })
  const tables = options.truncate ?? []
  if (tables.length > 0) {
    beforeEach(async () => {
      const present = await query<{ name: string }>('SELECT name FROM unnest($1::text[]) AS name WHERE to_regclass(name) IS NOT NULL', [tables])
      if (present.length > 0) await query(`TRUNCATE ${present.map((t) => t.name).join(', ')}`)
    })
  }
  return {
    get server() {
      return server()
    },
    query,
    env: () => ({ CTXAGENT_DATABASE_URL: server().url }),
  }
}
