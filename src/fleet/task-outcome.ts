import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import type { Layout } from '../storage/fs/layout.js'
import { FILES, locateTask } from '../storage/fs/layout.js'
import { safeState } from '../storage/task/lifecycle.js'
import type { TaskState } from '../storage/task/state.js'
import { llmOutage } from './jobs.js'
import type { Job, JobEnd, RetryPolicy } from './jobs.js'

// What a worker reads of a job's task in the tree (where it is, what it became) and the `run` that starts it.

/** `run`'s exit codes after it paused on SIGINT or SIGTERM (SPEC §9). */
const PAUSED_BY_SIGNAL = new Set([130, 143])

/** What became of a job's task once its process ended. */
export function settle(layout: Layout, job: Job, code: number | null, entry: { stopped: boolean; lastLine: string }, retry: RetryPolicy | undefined): JobEnd | null {
  const ref = locateTask(layout, job.task_uuid)
  if (ref === null) return { outcome: 'failed', failed: true, error: lastError(entry.lastLine) || `run exited with ${code}` }
  const state = safeState(ref.dir)
  if (ref.location === 'completed') return completedEnd(state, 'unknown')
  if (ref.location === 'paused') {
    const bySignal = entry.stopped || PAUSED_BY_SIGNAL.has(code ?? -1)
    // The LLM side failed in a way that passes (an outage, 5xx, 429, a timeout): the fleet runs it again later.
    if (!bySignal && retry !== undefined && llmOutage(state)) return { outcome: 'paused', error: state?.error ?? null, retry }
    return { outcome: 'paused', resume: bySignal, error: bySignal ? null : (state?.error ?? null) }
  }
  // Still in running/: its process died holding the lock.
  return null
}

/** `run`'s last log line as a job's error: the message of a JSON log line, or the line. */
function lastError(line: string): string {
  try {
    const parsed = JSON.parse(line) as { msg?: unknown; message?: unknown }
    const text = parsed.msg ?? parsed.message
    if (typeof text === 'string') return text.slice(0, 500)
  } catch {
    // a plain line
  }
  return line.slice(0, 500)
}

/** Whether a job's task is as it was before its agent started: not created (a new task), or still in paused/ with the same state.json (a resume). */
export function notBegun(layout: Layout, uuid: string, resume: boolean, pausedState: string | null): boolean {
  const ref = locateTask(layout, uuid)
  if (!resume) return ref === null
  return ref?.location === 'paused' && pausedState !== null && stateText(layout, uuid) === pausedState
}

export function stateText(layout: Layout, uuid: string): string | null {
  try {
    return readFileSync(join(layout.taskDir('paused', uuid), FILES.state), 'utf8')
  } catch {
    return null
  }
}

/**
 * The end of a job whose task another process took (its agent exited 4), once that
 * process is done with it; null while the task is still in running/. Paused by whoever
 * ran it: theirs to resume, not queued again.
 */
export function endedElsewhere(layout: Layout, job: Job): JobEnd | null {
  const ref = locateTask(layout, job.task_uuid)
  if (ref?.location === 'running') return null
  if (ref === null) return { outcome: 'failed', failed: true, error: 'its task is gone' }
  if (ref.location === 'paused') return { outcome: 'paused', error: 'paused by the process that ran it instead of this job' }
  return completedEnd(safeState(ref.dir), 'unknown')
}

/**
 * The end of a job whose task is in completed/. A task still saying `completing` there
 * is completed: its agent died after the move, before the last state write, which the
 * next scan makes (SPEC §3); the job must not keep the word of that instant.
 */
export function completedEnd(state: TaskState | null, unread: string): { outcome: string; error: string | null } {
  const status = state === null ? unread : state.status === 'completing' ? 'completed' : state.status
  return { outcome: status, error: status === 'completed' ? null : (state?.error ?? null) }
}
