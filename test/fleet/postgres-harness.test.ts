import pg from 'pg'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { canKillServer, startPostgres } from '../helpers/postgres.js'
import type { PgServer } from '../helpers/postgres.js'

let server: PgServer
beforeAll(async () => {
  server = await startPostgres()
})
afterAll(async () => {
  await server?.stop()
})

async function query<T extends pg.QueryResultRow>(sql: string): Promise<T[]> {
  const client = new pg.Client({ connectionString: server.url })
  client.on('error', () => {})
  await client.connect()
  try {
    return (await client.query<T>(sql)).rows
  } finally {
    await client.end()
  }
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
