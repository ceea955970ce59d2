import { join } from 'node:path'
import Database from 'better-sqlite3'
import { describe, expect, it } from 'vitest'
import { PgStore } from '../../../src/storage/index/pg-store.js'
import { SCHEMA_VERSION, versionBefore } from '../../../src/storage/index/pg-schema.js'
import { SqliteStore } from '../../../src/storage/index/store.js'
import type { IndexStore } from '../../../src/storage/index/store.js'
import { pgCountersMigration, pgTotalsFunction } from '../../../src/storage/index/pg-totals.js'
import { FIRST_COUNTERS, LATER_COUNTERS, LATER_TASK_COLUMNS } from '../../../src/storage/index/counter-eras.js'
import type { CounterRow } from '../../../src/storage/index/totals.js'
import { makeTree, uuidN } from '../../fixtures/tree.js'
import { usePostgres } from '../../helpers/use-postgres.js'
import { taskRow as row } from '../../fixtures/task-row.js'
import { SQLITE_UNDO_LATER_COUNTERS, SQLITE_UNDONE } from './undo.js'

const db = usePostgres()

/** The counters of alice's tasks (model ''), as /metrics reads them. */
async function alice(store: IndexStore): Promise<Pick<CounterRow, 'llm_calls' | 'prompt' | 'cache_write' | 'summary_calls' | 'final_summary_calls'>> {
  const c = (await store.totals()).counters.find((r) => r.user === 'alice')
  expect(c).toBeDefined()
  const { llm_calls, prompt, cache_write, summary_calls, final_summary_calls } = c as CounterRow
  return { llm_calls, prompt, cache_write, summary_calls, final_summary_calls }
}

/** Rows an older ctxagent wrote (no cache writes, no summary calls): one live, one deleted since; 2 turns and 8 prompt tokens each. */
const OLD_INSERT = (uuid: string, user: string) =>
  `INSERT INTO tasks (uuid, status, location, task_type, created_at, metadata, llm_call_count, prompt_tokens, total_tokens, ${user})
   VALUES ('${uuid}', 'completed', 'completed', 'issue', '2024-01-01T00:00:00.000Z', '{}', 2, 8, 8, 'alice')`

/** What an index migrated from before the later counters must do, whichever it is. */
async function afterMigration(store: IndexStore): Promise<void> {
  // The old rows read as none of the new figures, and every old figure is kept (the deleted task's too).
  expect(await alice(store)).toEqual({ llm_calls: 4, prompt: 16, cache_write: 0, summary_calls: 0, final_summary_calls: 0 })
  expect((await store.get(uuidN(1)))?.cache_write_tokens ?? null).toBeNull()
  // The live task written again with them (a new write, or reindex): counted.
  const full = row(uuidN(1), { llm_call_count: 3, prompt_tokens: 8, cache_write_tokens: 5, summary_calls: 2, final_summary_calls: 1 })
  store.upsert(full)
  const expected = { llm_calls: 5, prompt: 16, cache_write: 5, summary_calls: 2, final_summary_calls: 1 }
  expect(await alice(store)).toEqual(expected)
  // Deleted (cleanup): the counters keep what it had.
  store.remove(uuidN(1))
  expect(await alice(store)).toEqual(expected)
  // A rebuild (reindex) counts the live rows once and keeps the retired part.
  const other = row(uuidN(3), { llm_call_count: 1, prompt_tokens: 4, cache_write_tokens: 3, summary_calls: 1, final_summary_calls: 0 })
  store.upsert(other)
  await store.replaceAll([other])
  expect(await alice(store)).toEqual({ llm_calls: 6, prompt: 20, cache_write: 8, summary_calls: 3, final_summary_calls: 1 })
  expect(await store.get(uuidN(3))).toMatchObject({ cache_write_tokens: 3, summary_calls: 1, final_summary_calls: 0 })
}

describe('cache writes and summary calls in the index', () => {
  it('tasks.db: migrates an index from before them, keeping every figure it counted', async () => {
    const path = join(makeTree().base, 'tasks.db')
    SqliteStore.open(path).db.close()
    const raw = new Database(path)
    raw.exec(SQLITE_UNDO_LATER_COUNTERS)
    raw.pragma(`user_version = ${(raw.pragma('user_version', { simple: true }) as number) - SQLITE_UNDONE}`)
    raw.exec(`${OLD_INSERT(uuidN(1), 'user')}; ${OLD_INSERT(uuidN(2), 'user')}; DELETE FROM tasks WHERE uuid = '${uuidN(2)}';`)
    raw.close()
    const store = SqliteStore.open(path)
    try {
      await afterMigration(store)
    } finally {
      await store.close()
    }
  })

  it('PostgreSQL: migrates an index from before them, keeping every figure it counted', async () => {
    await db.query('DROP SCHEMA public CASCADE; CREATE SCHEMA public')
    await (await PgStore.open(db.server.url, () => undefined)).close()
    // The last migration undone: the columns dropped (the trigger's function made again as before, counting the first counters alone).
    await db.query(
      `${pgTotalsFunction(FIRST_COUNTERS)}
       ${LATER_TASK_COLUMNS.map((c) => `ALTER TABLE tasks DROP COLUMN ${c};`).join(' ')}
       ${LATER_COUNTERS.map((c) => `ALTER TABLE task_counters DROP COLUMN ${c};`).join(' ')}
       UPDATE ctxagent_schema SET version = ${versionBefore(pgCountersMigration())}`,
    )
    await db.query(`${OLD_INSERT(uuidN(1), '"user"')}; ${OLD_INSERT(uuidN(2), '"user"')}; DELETE FROM tasks WHERE uuid = '${uuidN(2)}'`)
    const store = await PgStore.open(db.server.url, () => undefined)
    try {
      await afterMigration(store)
      expect(await db.query('SELECT version FROM ctxagent_schema')).toEqual([{ version: SCHEMA_VERSION }])
    } finally {
      await store.close()
    }
  })
})
