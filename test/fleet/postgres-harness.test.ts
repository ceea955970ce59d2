import { describe, expect, it } from 'vitest'
import { canKillServer } from '../helpers/postgres.js'
import { usePostgres } from '../helpers/use-postgres.js'

const database = usePostgres()
const query = database.query

describe('test PostgreSQL', () => {
  it('serves a database of its own on 127.0.0.1', async () => {
    expect(new URL(database.server.url).hostname).toBe('127.0.0.1')
    const [row] = await query<{ db: string }>('SELECT current_database() AS db')
    expect(database.server.url.endsWith(`/${row?.db}`)).toBe(true)
  })

  it.runIf(canKillServer())('keeps committed rows across a SIGKILL and a restart', async () => {
    await query('CREATE TABLE kept (n int)')
    await query('INSERT INTO kept VALUES (1), (2)')
    await database.server.kill()
    await expect(query('SELECT 1')).rejects.toThrow()
    await database.server.restart()
    expect(await query<{ n: number }>('SELECT n FROM kept ORDER BY n')).toEqual([{ n: 1 }, { n: 2 }])
  })
})
