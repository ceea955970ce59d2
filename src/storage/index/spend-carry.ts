import { existsSync } from 'node:fs'
import type { PoolClient } from 'pg'
import { LOCK_KEYS } from './pg-schema.js'
import { PG_SPEND, PG_SPEND_CARRIED_MIGRATION } from './spend.js'
import type { SpendRow } from './spend.js'
import { TaskIndex } from './task-index.js'

/*
 * One spend ledger (docs/fleet-operations.md#joining-a-fleet): a tree that ran on one host
 * before it joined a fleet has its day's (and month's) spend in tasks.db's user_spend. The
 * fleet's caps read PostgreSQL's, so that spend is carried there: by `reindex`, and by the
 * first fleet use of the tree (any command but an agent that opens the fleet's index).
 * What is carried is recorded per tree, so carrying again adds only what the host spent since.
 */

/** tasks.db's spend rows, every day it has; none when there is no tasks.db. */
export function hostSpend(dbPath: string): SpendRow[] {
  if (!existsSync(dbPath)) return []
  const db = TaskIndex.open(dbPath)
  try {
    return db.spend.byDay('0000-00-00', '9999-99-99')
  } finally {
    db.close()
  }
}

/** Adds to user_spend what `rows` hold beyond what `source` carried before; returns the USD added. */
export async function carrySpend(client: PoolClient, source: string, rows: readonly SpendRow[]): Promise<number> {
  if (rows.length === 0) return 0
  await client.query('SELECT pg_advisory_xact_lock($1)', [LOCK_KEYS.carrySpend])
  // Made here, under the lock, not by a numbered migration: only a tree that has a tasks.db ever needs it.
  await client.query(PG_SPEND_CARRIED_MIGRATION)
  const json = JSON.stringify(rows)
  const delta = (await client.query<SpendRow>(PG_SPEND.uncarried, [source, json])).rows.map((r) => ({ ...r, usd: Number(r.usd), requests: Number(r.requests) }))
  if (delta.length > 0) await client.query(PG_SPEND.add, [JSON.stringify(delta)])
  await client.query(PG_SPEND.carried, [source, json])
  return delta.reduce((sum, r) => sum + r.usd, 0)
}
