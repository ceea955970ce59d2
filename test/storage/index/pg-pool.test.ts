import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { connectPool, IDLE_IN_TRANSACTION_SECONDS, inTransaction } from '../../../src/storage/index/pg-pool.js'
import { startPostgres } from '../../helpers/postgres.js'
import type { PgServer } from '../../helpers/postgres.js'

let server: PgServer
beforeAll(async () => {
  server = await startPostgres()
})
afterAll(async () => {
  await server?.stop()
})

describe('inTransaction', () => {
  it('bounds how long its transaction may sit idle (a frozen process must not hold its row locks for ever), and only that transaction', async () => {
    const pool = await connectPool(server.url, 'test', 1)
    try {
      const inside = await inTransaction(
        pool,
        async (client) => (await client.query<{ t: string }>("SELECT current_setting('idle_in_transaction_session_timeout') AS t")).rows[0]?.t,
      )
      expect(inside).toBe(`${IDLE_IN_TRANSACTION_SECONDS}s`)
      // The same pooled connection afterwards: the server's default again.
      expect((await pool.query<{ t: string }>("SELECT current_setting('idle_in_transaction_session_timeout') AS t")).rows[0]?.t).toBe('0')
      await expect(inTransaction(pool, async () => Promise.reject(new Error('rolled back')))).rejects.toThrow('rolled back')
      expect((await pool.query<{ t: string }>("SELECT current_setting('idle_in_transaction_session_timeout') AS t")).rows[0]?.t).toBe('0')
    } finally {
      await pool.end()
    }
  })
})
