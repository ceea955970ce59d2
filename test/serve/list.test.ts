import { join } from 'node:path'
import Database from 'better-sqlite3'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { makeTree, uuidN } from '../fixtures/tree.js'
import { cliAuto } from '../helpers/in-process.js'
import { queryRows, startPostgres } from '../helpers/postgres.js'
import type { PgServer } from '../helpers/postgres.js'
import { startServe } from './helpers.js'

let server: PgServer
beforeAll(async () => {
  server = await startPostgres()
})
afterAll(async () => {
  await server?.stop()
})

describe.each([
  ['tasks.db', () => ({})],
  ['PostgreSQL', () => ({ CTXAGENT_DATABASE_URL: server.url })],
] as const)('the task list (%s)', (backend, envOf) => {
  it('filters by text case-insensitively, with its count and pages newest first, also in rows written without a search line', async () => {
    const env: Record<string, string> = envOf()
    const tree = makeTree()
    tree.write({ uuid: uuidN(1), user: 'alice', repository: 'Acme/Widgets', createdAt: '2024-01-10T10:00:00.000Z' })
    tree.write({ uuid: uuidN(2), user: 'bob', repository: 'acme/widgets', createdAt: '2024-01-11T10:00:00.000Z' })
    tree.write({ uuid: uuidN(3), user: 'alice', repository: 'other/thing', createdAt: '2024-01-12T10:00:00.000Z' })
    tree.write({ uuid: uuidN(4), user: 'alice', repository: 'acme/widgets', location: 'paused', createdAt: '2024-01-13T10:00:00.000Z' })
    const res = await cliAuto(['reindex', '--home', tree.base, '--config', 'none'], env)
    expect(res.code, res.stderr).toBe(0)
    const s = await startServe(tree.base, { env })
    const list = async (query: string) => {
      const r = await s.get(`/api/tasks?${query}`)
      expect(r.status).toBe(200)
      const uuids = (await r.text())
        .trim()
        .split('\n')
        .filter(Boolean)
        .map((l) => (JSON.parse(l) as { uuid: string }).uuid)
      return { uuids, total: Number(r.headers.get('x-total-count')) }
    }
    const all = async () => {
      expect(await list('q=ACME%2FWIDGETS')).toEqual({ uuids: [uuidN(4), uuidN(2), uuidN(1)], total: 3 })
      expect(await list('q=acme%2Fwidgets&limit=1&offset=1')).toEqual({ uuids: [uuidN(2)], total: 3 })
      expect(await list('q=widgets&user=alice')).toEqual({ uuids: [uuidN(4), uuidN(1)], total: 2 })
      expect(await list('q=widgets&status=paused')).toEqual({ uuids: [uuidN(4)], total: 1 })
      expect(await list(`q=${uuidN(3).slice(-6)}`)).toEqual({ uuids: [uuidN(3)], total: 1 })
      // LIKE's wildcards are text like any other.
      expect(await list('q=acme%25widgets')).toEqual({ uuids: [], total: 0 })
      expect(await list('q=acme_widgets')).toEqual({ uuids: [], total: 0 })
      // Without a text: the count from the totals.
      expect(await list('user=alice')).toEqual({ uuids: [uuidN(4), uuidN(3), uuidN(1)], total: 3 })
    }
    await all()
    // Rows an older ctxagent wrote have no search line: their metadata is matched instead.
    if (backend === 'tasks.db') {
      const db = new Database(join(tree.base, 'tasks.db'))
      db.prepare('UPDATE tasks SET search = NULL').run()
      db.close()
    } else {
      await queryRows(server.url, 'UPDATE tasks SET search = NULL')
    }
    await all()
  })
})
