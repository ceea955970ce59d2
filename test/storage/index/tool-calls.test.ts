import { join } from 'node:path'
import Database from 'better-sqlite3'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { PgStore } from '../../../src/storage/index/pg-store.js'
import { SCHEMA_VERSION, versionBefore } from '../../../src/storage/index/pg-schema.js'
import { pgToolCallsMigration } from '../../../src/storage/index/pg-totals.js'
import { SqliteStore } from '../../../src/storage/index/store.js'
import type { IndexStore } from '../../../src/storage/index/store.js'
import { makeTree, uuidN } from '../../fixtures/tree.js'
import { queryRows, startPostgres } from '../../helpers/postgres.js'
import type { PgServer } from '../../helpers/postgres.js'
import { taskRow as row } from '../../fixtures/task-row.js'
import { SQLITE_UNDO_LATER_COUNTERS, SQLITE_UNDONE } from './undo.js'

let server: PgServer
beforeAll(async () => {
  server = await startPostgres()
})
afterAll(async () => {
  await server?.stop()
})

async function tools(store: IndexStore): Promise<Record<string, number>> {
  return Object.fromEntries((await store.totals()).tools.map((t) => [`${t.tool}/${t.outcome}`, t.n]))
}

/** Rows of an index from before tallies (no tool_calls column): one live with 5 calls, one deleted (cleanup) with 3. */
const OLD_ROWS = { live: 5, deleted: 3 }

/** What an index migrated from before tallies must do, whichever it is. */
async function afterMigration(store: IndexStore): Promise<void> {
  // Every call an index held before is unknown, the deleted task's too: the counter goes on from the whole.
  expect(await tools(store)).toEqual({ 'unknown/unknown': OLD_ROWS.live + OLD_ROWS.deleted })
  // The live task written again by its owner, with a tally: its old calls stay unknown, its new ones are by tool.
  const tallied = row(uuidN(1), { total_tool_calls: 8, tool_calls: JSON.stringify({ unknown: { unknown: 5 }, read_file: { success: 2, error: 1 } }) })
  store.upsert(tallied)
  const expected = { 'unknown/unknown': 8, 'read_file/success': 2, 'read_file/error': 1 }
  expect(await tools(store)).toEqual(expected)
  // Tallies that are no tally (written by hand, damaged) count nothing and break no write.
  for (const bad of ['not json', '[1, 2]', '{"read_file": 3}', '{"read_file": {"success": 1.5, "error": "2"}}', '{"x": {"y": 1e300}}']) {
    store.upsert(row(uuidN(2), { total_tool_calls: 4, tool_calls: bad }))
    expect((await store.get(uuidN(2)))?.tool_calls).toBe(bad)
  }
  store.remove(uuidN(2))
  expect(await tools(store)).toEqual(expected)
  // A rebuild (reindex) counts the live rows once and keeps the retired part.
  await store.replaceAll([tallied])
  expect(await tools(store)).toEqual(expected)
}

const OLD_INSERT = (uuid: string, calls: number, user: string) =>
  `INSERT INTO tasks (uuid, status, location, task_type, created_at, metadata, total_tool_calls, ${user}) VALUES ('${uuid}', 'completed', 'completed', 'issue', '2024-01-01T00:00:00.000Z', '{}', ${calls}, 'alice')`

describe('tool calls by tool and outcome in the index', () => {
  it('tasks.db: migrates an index from before tallies, keeping every call it counted', async () => {
    const path = join(makeTree().base, 'tasks.db')
    SqliteStore.open(path).db.close()
    // Back to the version before, and rows written as an older ctxagent wrote them (its triggers count them).
    const raw = new Database(path)
    // The tallies' migration and those after it (the budgets' tables, the later counters, the deliveries) undone.
    raw.exec(SQLITE_UNDO_LATER_COUNTERS)
    raw.exec(
      `DROP TABLE user_spend; DROP TABLE llm_key_limits; DROP TRIGGER tasks_tool_calls_insert; DROP TRIGGER tasks_tool_calls_update; DROP TABLE task_tool_calls; ALTER TABLE tasks DROP COLUMN tool_calls;`,
    )
    raw.pragma(`user_version = ${(raw.pragma('user_version', { simple: true }) as number) - 2 - SQLITE_UNDONE}`)
    raw.exec(`${OLD_INSERT(uuidN(1), OLD_ROWS.live, 'user')}; ${OLD_INSERT(uuidN(2), OLD_ROWS.deleted, 'user')}; DELETE FROM tasks WHERE uuid = '${uuidN(2)}';`)
    raw.close()
    const store = SqliteStore.open(path)
    try {
      await afterMigration(store)
    } finally {
      await store.close()
    }
  })

  it('PostgreSQL: migrates an index from before tallies, keeping every call it counted', async () => {
    const q = (sql: string) => queryRows(server.url, sql)
    await q('DROP SCHEMA public CASCADE; CREATE SCHEMA public')
    await (await PgStore.open(server.url, () => undefined)).close()
    // The tallies' migration undone, and those after it: the review loop's, the jobs' history, the later counters, the queue waits and the fleet's counters (IF NOT EXISTS: run again as they are), the budgets' tables (dropped).
    await q(
      `DROP TABLE user_spend; DROP TABLE llm_key_limits; DROP TRIGGER tasks_tool_calls ON tasks; DROP TABLE task_tool_calls; ALTER TABLE tasks DROP COLUMN tool_calls; UPDATE ctxagent_schema SET version = ${versionBefore(pgToolCallsMigration())}`,
    )
    await q(
      `${OLD_INSERT(uuidN(1), OLD_ROWS.live, '"user"')}; ${OLD_INSERT(uuidN(2), OLD_ROWS.deleted, '"user"')}; DELETE FROM tasks WHERE uuid = '${uuidN(2)}'`,
    )
    const store = await PgStore.open(server.url, () => undefined)
    try {
      await afterMigration(store)
      expect(await q('SELECT version FROM ctxagent_schema')).toEqual([{ version: SCHEMA_VERSION }])
    } finally {
      await store.close()
    }
  })
})
