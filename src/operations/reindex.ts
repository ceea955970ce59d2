import { existsSync } from 'node:fs'
import { taskDiskUse } from '../storage/fs/disk.js'
import { LOCATIONS } from '../storage/fs/layout.js'
import type { Location } from '../storage/fs/layout.js'
import { finishCompleting } from '../storage/task/lifecycle.js'
import { indexDrift, SqliteStore } from '../storage/index/store.js'
import { PgStore } from '../storage/index/pg-store.js'
import { taskRow } from '../storage/task/row.js'
import type { TaskRow } from '../storage/index/task-index.js'
import type { TaskEnv } from '../storage/task/env.js'
import { beingCreated, listTasks, scanTask } from '../storage/task/scan.js'
import { stateRepairs } from '../storage/task/state.js'

export interface ReindexResult {
  indexed: number
  by_location: Record<Location, number>
  failed: { uuid: string; location: Location; error: string }[]
  /** Tasks indexed with counters of their state.json taken as 0 or absent (not whole numbers: see state-counts.ts), and which. */
  repaired: { uuid: string; location: Location; counters: string[] }[]
  /** Into PostgreSQL: the USD of tasks.db's spend carried into the fleet's ledger by this reindex (0 when it had been). */
  spend_carried_usd: number
}

/**
 * Rebuilds tasks.db from the task directories (gzipped ones included), replacing
 * every row in one transaction; finishes completions that were interrupted.
 */
export async function rebuildIndex(
  env: TaskEnv,
  progress: { start(total: number): void; tick(): void } = { start: () => undefined, tick: () => undefined },
): Promise<ReindexResult> {
  const result: ReindexResult = { indexed: 0, by_location: { running: 0, paused: 0, completed: 0 }, failed: [], repaired: [], spend_carried_usd: 0 }
  if (!env.layout.exists()) return result
  const refs = listTasks(env.layout)
  const rows: TaskRow[] = []
  progress.start(refs.length)
  for (const ref of refs) {
    const scanned = await scanTask(ref)
    if (scanned.ok) {
      const { metadata, counts } = scanned.task
      let state = scanned.task.state
      if (ref.location === 'completed' && state?.status === 'completing') {
        state = await finishCompleting({ ...env, index: null }, ref)
      }
      const repaired = stateRepairs(state)
      if (repaired.length > 0) result.repaired.push({ uuid: ref.uuid, location: ref.location, counters: [...repaired] })
      rows.push(taskRow(metadata, state, ref.location, counts))
      result.by_location[ref.location]++
    } else if (!beingCreated(ref)) {
      result.failed.push({ uuid: ref.uuid, location: ref.location, error: scanned.error })
    }
    progress.tick()
  }
  const index = env.index ?? SqliteStore.open(env.layout.db)
  try {
    await index.replaceAll(rows)
    // Into a fleet's index: the spend the tree's host recorded comes too (one ledger: docs/fleet-operations.md#joining-a-fleet).
    if (index instanceof PgStore) result.spend_carried_usd = await index.carryHostSpend(env.layout.db)
  } finally {
    if (env.index === null) await index.close()
  }
  result.indexed = rows.length
  return result
}

/**
 * Brings tasks.db back in step with the directories after a crash left it behind (a
 * reaper killed between its move and its row, tasks copied in by hand), without a
 * full reindex: only when the per-location counts disagree with a listing (cheap), and
 * then only the tasks whose row is missing, wrong or orphaned are read again. Every
 * watch-locks pass (and so every cleanup) runs it. Returns how many rows it changed.
 */
export async function reconcileIndex(env: TaskEnv): Promise<number> {
  const index = env.index
  if (index === null || (await indexDrift(index, env.layout)).length === 0) return 0
  const listed = new Map<string, Location>()
  for (const location of LOCATIONS) for (const uuid of env.layout.list(location)) listed.set(uuid, location)
  const indexed = await index.locations()
  let changed = 0
  for (const uuid of indexed.keys()) {
    if (listed.has(uuid)) continue
    index.remove(uuid)
    changed++
  }
  for (const [uuid, location] of listed) {
    if (indexed.get(uuid) === location) continue
    const ref = { uuid, location, dir: env.layout.taskDir(location, uuid) }
    const scanned = await scanTask(ref)
    // A task still being created has no metadata yet (its owner indexes it); one that moved meanwhile is its mover's to index.
    if (!scanned.ok || !existsSync(ref.dir)) continue
    index.upsert(taskRow(scanned.task.metadata, scanned.task.state, location, scanned.task.counts, location === 'completed' ? taskDiskUse(ref.dir) : null))
    changed++
  }
  return changed
}
