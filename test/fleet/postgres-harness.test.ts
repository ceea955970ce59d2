import pg from 'pg'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { canKillServer, queryRows, startPostgres } from '../helpers/postgres.js'
import type { PgServer } from '../helpers/postgres.js'

let server: PgServer
beforeAll(async () => {
  server = await startPostgres()
})
afterAll(async () => {
  await server?.stop()
})

function query<T extends pg.QueryResultRow>(sql: string, params: unknown[] = []): Promise<T[]> {
  return queryRows<T>(server.url, sql, params)
}

describe('test PostgreSQL', () => {
  it('serves a database of its own on 127.0.0.1', async () => {
    expect(new URL(server.url).hostname).toBe('127.0.0.1')
    const [row] = await query<{ db: string }>('SELECT current_database() AS db')
    expect(server.url.endsWith(`/${row?.db}`)).toBe(true)
  })

  it.runIf(canKillServer())('keeps committed rows across a SIGKILL and a restart', async () => {
    await query('CREATE TABLE kept (n int)')
    await query('INSERT INTO kept VALUES (1), (2)')
    await server.kill()
    await expect(query('SELECT 1')).rejects.toThrow()
    await server.restart()
    expect(await query<{ n: number }>('SELECT n FROM kept ORDER BY n')).toEqual([{ n: 1 }, { n: 2 }])
  })
})
