import type { ProviderWait } from '../llm/client.js'
import type { TaskHandle } from '../storage/task/handle.js'
import type { RunLog } from './log.js'

/**
 * Every wait on the provider is said (docs/running.md#waits): a line in the run's log (a
 * fleet worker's log relays it) with `wait_ms` and `wait_reason`, and a `wait` record in
 * planning.jsonl that `view` and the task page show. A short wait too: a job that sat a
 * minute in `running` before its retry says why.
 */
export interface WaitNote {
  /** How long, or null for a wait until a time (a usage limit lifting). */
  ms: number | null
  reason: string
  line: string
}

/** A wait before a retry, as the client decided it. */
export function retryWaitNote(wait: ProviderWait): WaitNote {
  return {
    ms: wait.ms,
    reason: wait.reason,
    line: `waiting ${seconds(wait.ms)} before retry ${wait.retry}: the provider answered ${wait.status}; ${wait.reason}`,
  }
}

/** Said in the log and recorded in the task; a task no longer ours records nothing. */
export function noteWait(handle: TaskHandle, log: Pick<RunLog, 'info'>, note: WaitNote): void {
  log.info(note.line, { wait_ms: note.ms === null ? null : Math.round(note.ms), wait_reason: note.reason })
  try {
    handle.addPlan('wait', note.line)
  } catch {
    // The task was lost (its lock taken over): the log line stands alone.
  }
}

const seconds = (ms: number): string => `${ms < 10_000 ? (ms / 1000).toFixed(1) : Math.round(ms / 1000)} s`
