import type { Location } from './layout.js'
import { finishCompleting } from './reaper.js'
import { TaskIndex, taskRow } from './task-index.js'
import type { TaskRow } from './task-index.js'
import type { TaskEnv } from './task-env.js'
import { listTasks, scanTask } from './task-scan.js'

export interface ReindexResult {
  indexed: number
  by_location: Record<Location, number>
  failed: { uuid: string; location: Location; error: string }[]
}

/**
 * Rebuilds tasks.db from the task directories (gzipped ones included), replacing
 * every row in one transaction; finishes completions that were interrupted.
 */
export async function rebuildIndex(env: TaskEnv, progress: { start(total: number): void; tick(): void } = { start: () => undefined, tick: () => undefined }): Promise<ReindexResult> {
  const result: ReindexResult = { indexed: 0, by_location: { running: 0, paused: 0, completed: 0 }, failed: [] }
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
      rows.push(taskRow(metadata, state, ref.location, counts))
      result.by_location[ref.location]++
    } else {
      result.failed.push({ uuid: ref.uuid, location: ref.location, error: scanned.error })
    }
    progress.tick()
  }
  const index = env.index ?? TaskIndex.open(env.layout.db)
  try {
    index.replaceAll(rows)
  } finally {
    if (env.index === null) index.close()
  }
  result.indexed = rows.length
  return result
}
