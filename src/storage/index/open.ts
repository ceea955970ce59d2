import { existsSync } from 'node:fs'
import type { PgStore } from './pg-store.js'
import type { IndexStore } from './store.js'

export interface IndexChoice {
  /** The fleet's database (docs/contract.md §14.1), or null for tasks.db. */
  databaseUrl: string | null
  /** tasks.db's path. */
  path: string
  /** False: an absent tasks.db stays absent (null). PostgreSQL's tables are always made. */
  create: boolean
  warn: (message: string) => void
  /** PostgreSQL only: an unreachable database is no error (writes queue for it). For agents, which must run on through an outage. */
  lazy?: boolean
}

/** The one place that chooses the index: PostgreSQL when a database URL is set, else tasks.db. */
export async function openIndexStore(choice: IndexChoice): Promise<IndexStore | null> {
  if (choice.databaseUrl !== null) {
    // Loaded only here: a command on tasks.db (most, on most hosts) does not compile the PostgreSQL index (docs/development.md#start-up).
    const { PgStore } = await import('./pg-store.js')
    const store = await PgStore.open(choice.databaseUrl, choice.warn, { lazy: choice.lazy === true })
    // A tree's first fleet use carries the spend its host recorded in tasks.db (one ledger: docs/fleet-operations.md#joining-a-fleet).
    // Not an agent's (lazy): it runs through an outage, and its worker's open carried it.
    if (choice.lazy !== true) await carryOnFirstUse(store, choice)
    return store
  }
  if (!choice.create && !existsSync(choice.path)) return null
  // Loaded here too: a command that lists directories (list, view) opens no index and compiles none of it.
  const { SqliteStore } = await import('./store.js')
  return SqliteStore.open(choice.path)
}

async function carryOnFirstUse(store: PgStore, choice: IndexChoice): Promise<void> {
  try {
    const usd = await store.carryHostSpend(choice.path)
    if (usd > 0) choice.warn(`carried $${usd.toFixed(2)} of spend from ${choice.path} into the fleet's ledger (the budgets count it)`)
  } catch (err) {
    choice.warn(`the spend in ${choice.path} could not be carried into the fleet's ledger (${(err as Error).message}); ctxagent reindex carries it`)
  }
}
