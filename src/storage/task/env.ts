import type { Config } from '../../config/schema.js'
import type { Layout } from '../fs/layout.js'
import type { IndexStore } from '../index/store.js'
import type { StalenessPolicy } from '../lock/staleness.js'

/** What the lifecycle needs from its caller: where, how, and when. */
export interface TaskEnv {
  layout: Layout
  config: Config
  /** The index (tasks.db or PostgreSQL), or null when it cannot be opened (the directories stay the truth). */
  index: IndexStore | null
  now: () => Date
  warn: (message: string) => void
}

export function stalenessPolicy(config: Config, staleAfterMs?: number): StalenessPolicy {
  const staleAfter = staleAfterMs ?? config.locks.stale_after_seconds * 1000
  const remote = config.locks.stale_after_remote_seconds
  return {
    staleAfterMs: staleAfter,
    staleAfterRemoteMs: remote === null ? 2 * staleAfter : remote * 1000,
  }
}
