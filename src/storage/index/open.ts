import { existsSync } from 'node:fs'
import { PgStore } from './pg-store.js'
import { SqliteStore } from './store.js'
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
  if (choice.databaseUrl !== null) return PgStore.open(choice.databaseUrl, choice.warn, { lazy: choice.lazy === true })
  if (!choice.create && !existsSync(choice.path)) return null
  return SqliteStore.open(choice.path)
}
