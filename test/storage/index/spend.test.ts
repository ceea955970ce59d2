import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { PgStore } from '../../../src/storage/index/pg-store.js'
import { SqliteStore } from '../../../src/storage/index/store.js'
import type { IndexStore } from '../../../src/storage/index/store.js'
import { makeTree, uuidN } from '../../fixtures/tree.js'
import { startPostgres } from '../../helpers/postgres.js'
import type { PgServer } from '../../helpers/postgres.js'
import { taskRow } from '../../fixtures/task-row.js'
import { join } from 'node:path'

let server: PgServer
beforeAll(async () => {
  server = await startPostgres()
})
afterAll(async () => {
  await server?.stop()
})

/** What both indexes keep for the budgets: spend per user per day, and usage limits per key hash. */
async function keepsSpend(store: IndexStore): Promise<void> {
  store.addSpend('alice', '2026-11-27', 0.5)
  store.addSpend('alice', '2026-11-28', 0.25)
  store.addSpend('alice', '2026-11-28', 0.125)
  store.addSpend('bob', '2026-11-28', 1)
  store.addSpend('alice', '2026-10-31', 9)
  expect(await store.spendTotals('alice', '2026-11-28')).toEqual({ user_day: 0.375, user_month: 0.875, fleet_day: 1.375 })
  expect(await store.spendTotals('carol', '2026-11-28')).toEqual({ user_day: 0, user_month: 0, fleet_day: 1.375 })
  expect(await store.spendByDay('2026-11-27', '2026-11-28')).toEqual([
    { user: 'alice', day: '2026-11-27', usd: 0.5, requests: 1 },
    { user: 'alice', day: '2026-11-28', usd: 0.375, requests: 2 },
    { user: 'bob', day: '2026-11-28', usd: 1, requests: 1 },
  ])
  // Cleanup deletes task rows and reindex rebuilds them: the spend stays.
  store.upsert(taskRow(uuidN(1), { user: 'alice' }))
  store.remove(uuidN(1))
  await store.replaceAll([taskRow(uuidN(2), { user: 'alice' })])
  expect((await store.spendTotals('alice', '2026-11-28')).user_month).toBe(0.875)
  // A key's limit: the latest word on it.
  expect(await store.keyLimit('k1')).toBeNull()
  store.setKeyLimit('k1', 'openai', '2026-11-28T11:00:00.000Z')
  expect(await store.keyLimit('k1')).toBe('2026-11-28T11:00:00.000Z')
  store.setKeyLimit('k1', 'openai', '2026-11-28T12:30:00.000Z')
  expect(await store.keyLimit('k1')).toBe('2026-11-28T12:30:00.000Z')
  expect(await store.keyLimit('k2')).toBeNull()
}

describe('spend per user per day and usage limits per key, in the index', () => {
  it('tasks.db', async () => {
    const tree = makeTree()
    const store = SqliteStore.open(join(tree.base, 'tasks.db'))
    try {
      await keepsSpend(store)
    } finally {
      await store.close()
    }
  })

  it('PostgreSQL (writes queued, reads after them)', async () => {
    const store = await PgStore.open(server.url, () => undefined)
    try {
      await keepsSpend(store)
    } finally {
      await store.close()
    }
  })
})
