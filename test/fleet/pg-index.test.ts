import { existsSync, readFileSync, unlinkSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { gzipSync } from 'node:zlib'
import type pg from 'pg'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { PgStore } from '../../src/storage/index/pg-store.js'
import { SCHEMA_VERSION } from '../../src/storage/index/pg-schema.js'
import { SqliteStore } from '../../src/storage/index/store.js'
import type { TaskRow } from '../../src/storage/index/task-index.js'
import { makeTree, uuidN } from '../fixtures/tree.js'
import type { Tree } from '../fixtures/tree.js'
import { cliIn } from '../helpers/in-process.js'
import { canKillServer, queryRows, startPostgres } from '../helpers/postgres.js'
import type { PgServer } from '../helpers/postgres.js'
import { taskRow } from '../fixtures/task-row.js'

let server: PgServer
beforeAll(async () => {
  server = await startPostgres()
})
afterAll(async () => {
  await server?.stop()
})

const NOW = { CTXAGENT_NOW: '2024-02-01T00:00:00.000Z' }

/** Settled tasks of several users, statuses and ages, one gzipped (as in the stats e2e test). */
function tree(): Tree {
  const t = makeTree()
  t.write({ uuid: uuidN(0xa1), location: 'completed', user: 'alice', createdAt: '2024-01-10T09:00:00.000Z', messages: 12, summaries: 2, tools: 3 })
  t.write({ uuid: uuidN(0xb2), location: 'paused', format: 'seed003', user: 'bob', createdAt: '2024-01-20T09:00:00.000Z', messages: 4 })
  t.write({ uuid: uuidN(0xd4), location: 'completed', status: 'failed', user: 'carol', createdAt: '2024-01-05T09:00:00.000Z', messages: 2 })
  const gz = t.write({
    uuid: uuidN(0xe5),
    location: 'completed',
    user: 'bob',
    createdAt: '2023-12-01T09:00:00.000Z',
    completedAt: '2023-12-01T10:00:00.000Z',
    messages: 9,
  })
  for (const name of ['messages.jsonl', 'summaries.jsonl', 'tools.jsonl']) {
    writeFileSync(join(gz, `${name}.gz`), gzipSync(readFileSync(join(gz, name))))
    unlinkSync(join(gz, name))
  }
  return t
}

function query<T extends pg.QueryResultRow>(sql: string, params: unknown[] = []): Promise<T[]> {
  return queryRows<T>(server.url, sql, params)
}

const row = (uuid: string, over: Partial<TaskRow> = {}): TaskRow =>
  taskRow(uuid, { total_tokens: 5_000_000_000, prompt_tokens: 4_000_000_000, completion_tokens: 1_000_000_000, ...over })

describe('the index in PostgreSQL', () => {
  it('reindex fills it, and stats --json from it equals stats from a scan of the directories', async () => {
    const t = tree()
    const db = { CTXAGENT_DATABASE_URL: server.url }
    const reindex = await cliIn(['reindex', '--home', t.base], db)
    expect(reindex.stderr).toBe('')
    expect(reindex.stdout).toContain('indexed 4 task(s) into the PostgreSQL index')
    expect(existsSync(join(t.base, 'tasks.db'))).toBe(false)
    const fromPg = await cliIn(['stats', '--json', '--home', t.base], { ...NOW, ...db })
    expect(fromPg.stderr).toBe('')
    const scanned = await cliIn(['stats', '--json', '--home', t.base], NOW)
    expect(scanned.stderr).toContain('no tasks.db')
    // The spend per user per day is the index's (user_spend): a scan of the directories has none to report.
    const { spend, ...fromIndex } = JSON.parse(fromPg.stdout) as { spend?: { days: unknown[] } }
    expect(spend?.days).toEqual([])
    expect(fromIndex).toEqual(JSON.parse(scanned.stdout))
    // and again, now that PostgreSQL caches the disk use it measured
    const { spend: _bobSpend, ...bobFromIndex } = JSON.parse(
      (await cliIn(['stats', '--json', '--user', 'bob', '--home', t.base], { ...NOW, ...db })).stdout,
    ) as {
      spend?: unknown
    }
    expect(bobFromIndex).toEqual(JSON.parse((await cliIn(['stats', '--json', '--user', 'bob', '--home', t.base], NOW)).stdout))
  })

  it('migrates once however many open it at once, and records its version', async () => {
    const stores = await Promise.all([1, 2, 3, 4].map(() => PgStore.open(server.url, () => undefined)))
    await Promise.all(stores.map((s) => s.close()))
    expect(await query('SELECT version FROM ctxagent_schema')).toEqual([{ version: SCHEMA_VERSION }])
  })

  it('answers the readers as tasks.db does (inheritance candidates, counts, rows)', async () => {
    const t = makeTree()
    const sqlite = SqliteStore.open(join(t.base, 'tasks.db'))
    const store = await PgStore.open(server.url, () => undefined)
    const rows = [
      row(uuidN(1)),
      row(uuidN(2), { completed_at: '2024-01-05T00:00:00.000Z' }),
      row(uuidN(3), { status: 'failed', completed_at: null }),
      row(uuidN(4), { task_identifier: null }),
      row(uuidN(5), { status: 'running', location: 'running', completed_at: null }),
      row(uuidN(6), { user: null }),
    ]
    for (const s of [sqlite, store]) await s.replaceAll(rows)
    const key = { task_type: 'issue', task_identifier: '7', repository: 'o/r', user: 'alice' }
    for (const k of [key, { ...key, task_identifier: null }, { ...key, user: null }]) {
      expect(await store.finishedWithKey(k)).toEqual(await sqlite.finishedWithKey(k))
    }
    expect(await store.counts()).toEqual(await sqlite.counts())
    expect(await store.get(uuidN(1))).toEqual(await sqlite.get(uuidN(1)))
    expect(await store.uuidsWithStatus('running')).toEqual([uuidN(5)])
    // a write is seen by the next read, however it was queued
    store.upsert(row(uuidN(1), { status: 'failed' }))
    store.remove(uuidN(6))
    store.setDiskUse([{ uuid: uuidN(2), disk: { bytes: 10, raw: 20 } }])
    expect((await store.get(uuidN(1)))?.status).toBe('failed')
    expect(await store.get(uuidN(6))).toBeUndefined()
    expect(await store.get(uuidN(2))).toMatchObject({ disk_bytes: 10, disk_bytes_raw: 20 })
    await Promise.all([sqlite.close(), store.close()])
  })

  it.runIf(canKillServer())('keeps writes made while PostgreSQL is down, and makes them when it is back', async () => {
    const store = await PgStore.open(server.url, () => undefined)
    await store.replaceAll([])
    await server.kill()
    store.upsert(row(uuidN(7), { status: 'running', location: 'running' }))
    store.upsert(row(uuidN(7), { status: 'completed' }))
    await expect(store.get(uuidN(7))).rejects.toThrow(/PostgreSQL index writes failed/)
    await server.restart()
    await store.close()
    expect(await query('SELECT uuid, status FROM tasks')).toEqual([{ uuid: uuidN(7), status: 'completed' }])
  })

  it('says in one line when the database is unreachable or its URL is bad, and changes nothing', async () => {
    const t = tree()
    const closed = { CTXAGENT_DATABASE_URL: 'postgres://nobody:secret@127.0.0.1:1/none' }
    const stats = await cliIn(['stats', '--json', '--home', t.base], { ...NOW, ...closed })
    expect(stats.code).toBe(0)
    expect(stats.stderr).toMatch(/^ctxagent: warning: the PostgreSQL index cannot be opened \(.*ECONNREFUSED.*\): counting from the directories instead\n$/)
    expect(stats.stderr).not.toContain('secret')
    const reindex = await cliIn(['reindex', '--home', t.base], closed)
    expect(reindex.code).toBe(1)
    expect(reindex.stderr.trim().split('\n').at(-1)).toMatch(/^ctxagent: the PostgreSQL index cannot be reached, so it was not rebuilt \(/)
    expect(reindex.stderr).not.toContain('secret')
    const bad = await cliIn(['stats', '--home', t.base], { CTXAGENT_DATABASE_URL: 'mysql://x' })
    expect(bad.code).toBe(2)
    expect(bad.stderr).toBe(
      'ctxagent: CTXAGENT_DATABASE_URL is not a PostgreSQL URL (give one like postgres://user:password@db.example.com:5432/ctxagent, or unset it)\n',
    )
    expect(existsSync(join(t.base, 'tasks.db'))).toBe(false)
  })
})
