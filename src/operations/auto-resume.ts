import { existsSync } from 'node:fs'
import { join } from 'node:path'
import { FILES } from '../storage/fs/layout.js'
import type { TaskRef } from '../storage/fs/layout.js'
import { safeState } from '../storage/task/lifecycle.js'
import type { TaskState } from '../storage/task/state.js'
import type { TaskEnv } from '../storage/task/env.js'
import { listTasks } from '../storage/task/scan.js'

/** A paused task whose pause has ended by itself: a usage limit lifted, a budget window reset (docs/running.md#pauses-that-end-by-themselves). */
export interface DueResume {
  uuid: string
  reason: 'rate-limit' | 'budget'
  resume_at: string
}

/**
 * The pause a task ends by itself, and when: a usage limit (paused_by rate-limit) or a budget window
 * (paused_by budget) with its resume_at; null for any other pause.
 */
export function selfEndingPause(state: TaskState | null): { reason: 'rate-limit' | 'budget'; at: number } | null {
  if (state === null || state.status !== 'paused' || typeof state.resume_at !== 'string') return null
  const at = Date.parse(state.resume_at)
  if (Number.isNaN(at)) return null
  if (state.paused_by === 'rate-limit') return { reason: 'rate-limit', at }
  if (state.paused_by === 'budget') return { reason: 'budget', at }
  return null
}

/**
 * On one host, the paused tasks whose pause has ended by `env.now()` (the clock a test
 * pins with CTXAGENT_NOW): watch-locks starts their `run --resume`. A task holding a lock
 * (a resume on its way, an operator's compress) is left to the next pass.
 */
export function dueResumes(env: TaskEnv): DueResume[] {
  const now = env.now().getTime()
  const due: DueResume[] = []
  for (const ref of listTasks(env.layout, ['paused'])) {
    if (existsSync(join(ref.dir, FILES.lock))) continue
    const pause = selfEndingPause(safeStateOf(ref))
    if (pause !== null && pause.at <= now) due.push({ uuid: ref.uuid, reason: pause.reason, resume_at: new Date(pause.at).toISOString() })
  }
  return due
}

function safeStateOf(ref: TaskRef): TaskState | null {
  try {
    return safeState(ref.dir)
  } catch {
    // One unreadable task never stops the pass: it is simply not resumed.
    return null
  }
}
