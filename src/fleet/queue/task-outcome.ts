import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import type { Layout } from '../../storage/fs/layout.js'
import { FILES, locateTask } from '../../storage/fs/layout.js'
import type { Location } from '../../storage/fs/layout.js'
import { safeState } from '../../storage/task/lifecycle.js'
import { deliveryOf, undelivered } from '../../storage/task/delivery.js'
import type { TaskState } from '../../storage/task/state.js'
import { llmOutage } from './retry-policy.js'
import type { HandBack, Job, JobEnd, LimitWait } from './job.js'
import type { RetryPolicy } from './retry-policy.js'

// What a worker reads of a job's task in the tree (where it is, what it became) and the `run` that starts it.

/** `run`'s exit codes after it paused on SIGINT or SIGTERM (docs/contract.md §9). */
const PAUSED_BY_SIGNAL = new Set([130, 143])

/** A job's task as its worker finds it when the job's process has ended. */
export interface TaskSnapshot {
  location: Location | null
  state: TaskState | null
  /** A resume's task is still in paused/ with the state.json it had before its agent started: the agent never began. */
  unchanged: boolean
}

/** Where a job's task is and what it says; `pausedState`: a resume's paused state.json read before its agent started. */
export function taskSnapshot(layout: Layout, uuid: string, pausedState: string | null): TaskSnapshot {
  const ref = locateTask(layout, uuid)
  if (ref === null) return { location: null, state: null, unchanged: false }
  const unchanged = ref.location === 'paused' && pausedState !== null && stateText(layout, uuid) === pausedState
  return { location: ref.location, state: safeState(ref.dir), unchanged }
}

/** What settle() is given: the task as its worker finds it, its process's exit code, how its worker saw that process end, fleet.retry. */
export interface TaskEndInput {
  task: TaskSnapshot
  code: number | null
  child: Pick<ChildEnd, 'stopped' | 'lastLine'>
  retry: RetryPolicy | undefined
}

/** What became of a job's task once its process ended: null while it is still in running/ (its process died holding the lock). */
export function settle({ task, code, child: entry, retry }: TaskEndInput): JobEnd | null {
  if (task.location === null) return { outcome: 'failed', failed: true, error: lastError(entry.lastLine) || `run exited with ${code}` }
  const state = task.state
  if (task.location === 'completed') return setupFailedEnd(state, retry) ?? completedEnd(state, 'unknown')
  if (task.location === 'paused') {
    const bySignal = entry.stopped || PAUSED_BY_SIGNAL.has(code ?? -1)
    const limited = bySignal ? null : limitedEnd(state, retry)
    if (limited !== null) return limited
    // The LLM side failed in a way that passes (an outage, 5xx, 429, a timeout): the fleet runs it again later.
    if (!bySignal && retry !== undefined && llmOutage(state)) return { outcome: 'paused', error: state?.error ?? null, retry }
    return { outcome: 'paused', resume: bySignal, error: bySignal ? null : (state?.error ?? null) }
  }
  // Still in running/: its process died holding the lock.
  return null
}

/**
 * A task that ended setup_failed (docs/environments.md#in-a-fleet): the environment's failure,
 * not the agent's (no LLM request was made). Retried by fleet.retry as an outage is, each
 * attempt a new task (the one that ended is its record); null for any other task.
 */
export function setupFailedEnd(state: TaskState | null, retry: RetryPolicy | undefined): JobEnd | null {
  if (state?.status !== 'setup_failed' || retry === undefined) return null
  return { outcome: 'setup_failed', error: `environment setup failed: ${state.error ?? 'unknown'}`, retry, fresh: true, reason: 'setup_failed' }
}

/** fleet.retry.max_wait_hours' default. */
const MAX_WAIT_HOURS = 24

/**
 * A task paused until a known time (docs/fleet-operations.md#waits), or by a budget: a
 * usage limit (paused_by rate-limit) and a budget window (paused_by budget) with
 * their resume_at: the job waits until then. A budget pause with no time (the task's own
 * cap: an operator raises it) ends the job, its history naming the cap. Null otherwise.
 */
export function limitedEnd(state: TaskState | null, retry: RetryPolicy | undefined): JobEnd | null {
  if (state === null || state.status !== 'paused') return null
  const wait = limitWait(state, retry?.max_wait_hours ?? MAX_WAIT_HOURS)
  if (wait !== null) return { outcome: 'paused', error: state.error ?? null, wait }
  if (state.paused_by === 'budget') return { outcome: 'paused', error: state.error ?? null, reason: 'budget', cap: state.budget_cap ?? null }
  return null
}

/** The wait a paused task's state asks for, or null (no resume_at, or not a pause that ends by itself). */
export function limitWait(state: TaskState, maxWaitHours: number): LimitWait | null {
  const until = state.resume_at
  if (typeof until !== 'string' || Number.isNaN(Date.parse(until))) return null
  const iso = new Date(Date.parse(until)).toISOString()
  if (state.paused_by === 'rate-limit') return { until: iso, reason: 'rate-limit', cap: null, maxWaitSeconds: maxWaitHours * 3600 }
  if (state.paused_by === 'budget') return { until: iso, reason: 'budget', cap: state.budget_cap ?? null, maxWaitSeconds: null }
  return null
}

/** How a job's process ended, as its worker saw it. */
export interface ChildEnd {
  code: number | null
  signal: NodeJS.Signals | null
  /** The worker asked the task to stop (its own stop): the resume goes back to the queue. */
  stopped: boolean
  /** The last problem the process reported on stderr (worker-log.ts problemIn), for an error; '' when none. */
  lastLine: string
}

/**
 * What a worker does once a job's process has ended:
 * - `hand_back`: nothing ran (killed before its task began, or a resume that found the task locked); the
 *   job waits again after `waitMs` with this attempt counted, or ends `last` after fleet.max_attempts;
 * - `release`: stopped by its worker before its task was created; it waits again as it was;
 * - `elsewhere`: another process runs its task (its agent exited 4); the job ends when that run does;
 * - `left_running`: its process died holding the task's lock; watch-locks recovers the task and settles the job;
 * - `end`: the job ends with what its task became.
 */
export type CloseVerdict =
  | { kind: 'hand_back'; why: string; error: string; last: HandBack; waitMs: number; maxAttempts: number }
  | { kind: 'release' }
  | { kind: 'elsewhere' }
  | { kind: 'left_running'; detail: string }
  | { kind: 'end'; end: JobEnd }

/** How run refuses a task whose own cost cap is spent (run/budget-start.ts). */
const TASK_CAP_REFUSAL = /^(?:ctxagent: )?task \S+'s cost cap \(/

/** The worker's decision when a job's process closes: pure, from the job, how its process ended and its task's snapshot. */
export function closeVerdict(
  job: Job,
  resume: boolean,
  child: ChildEnd,
  task: TaskSnapshot,
  policy: { maxAttempts: number; retry: RetryPolicy | undefined },
): CloseVerdict {
  const { code, signal, stopped } = child
  const notBegun = resume ? task.location === 'paused' && task.unchanged : task.location === null
  // Killed (SIGKILL, the OOM killer) before its task began, or a resume that found the paused task's lock held
  // (exit 4: an operator's compress, a lock a killed resume left): nothing ran, and nobody else would resume it.
  // Or refused by a cost cap spent (exit 5) that the claim did not see yet (a spend added since, a resume's context):
  // the next claim sees it and makes the job wait for the reset (docs/fleet-operations.md#waits).
  const refused = code === 5 && signal === null
  // A resume refused by its task's own cap: no window resets that one, so the job ends with the task paused for
  // someone to raise it (run --resume --max-cost), rather than be handed back to be refused again.
  if (refused && resume && notBegun && !stopped && TASK_CAP_REFUSAL.test(lastError(child.lastLine)))
    return { kind: 'end', end: { outcome: 'paused', reason: 'budget', cap: 'task', error: lastError(child.lastLine).slice(0, 500) } }
  if ((signal !== null || (resume && code === 4) || refused) && !stopped && notBegun) {
    const max = policy.maxAttempts
    const why =
      signal !== null
        ? `was killed (${signal})`
        : refused
          ? `was refused${child.lastLine === '' ? '' : ` (${lastError(child.lastLine).slice(0, 300)})`}`
          : 'found the task locked'
    const error = `its agent ${why} before the task began (attempt ${job.attempts} of fleet.max_attempts ${max})`
    // The last attempt leaves a new job's task uncreated (failed), a resume's task paused as it was.
    const last: HandBack = { outcome: resume ? 'paused' : 'failed', error, reason: signal !== null ? 'killed' : 'refused' }
    // A lock is held for a while (a compress asks the LLM): the job is handed back after a pause that grows.
    const waitMs = signal === null ? Math.min(1000 * 2 ** (job.attempts - 1), 5_000) : 0
    return { kind: 'hand_back', why, error, last, waitMs, maxAttempts: max }
  }
  // Stopped before its task was created: nothing ran, so the job waits again as it was.
  if (stopped && !resume && task.location === null) return { kind: 'release' }
  // An eval's trial stopped during its hidden check exits 130/143 with its task ended and no verdict: the job is handed
  // back as a stop's is, and its next claim judges the task without running its agent (docs/eval.md#a-stop).
  if (job.spec.eval !== undefined && task.location === 'completed' && PAUSED_BY_SIGNAL.has(code ?? -1))
    return { kind: 'end', end: { outcome: 'paused', resume: true, error: null } }
  const end = settle({ task, code, child, retry: policy.retry })
  // Another process took the task first (an operator's `run --resume`; or, for a new job, an earlier claim's agent
  // still running after a pass handed the job back while this worker was frozen): the job ends with what that run makes of it.
  if (end === null && code === 4 && !stopped) return { kind: 'elsewhere' }
  // Its process died holding the task's lock: watch-locks reaps it and settles the job (docs/fleet.md#recovery-and-reconciliation).
  if (end === null)
    return {
      kind: 'left_running',
      detail: `${signal !== null ? `killed by ${signal}` : `exit ${code}`}${child.lastLine === '' ? '' : `; its last problem: ${child.lastLine.slice(0, 200)}`}`,
    }
  return { kind: 'end', end }
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
 * next scan makes (docs/contract.md §3); the job must not keep the word of that instant.
 * One whose delivery was refused or failed ends `undelivered`.
 */
export function completedEnd(state: TaskState | null, unread: string): { outcome: string; error: string | null } {
  const status = state === null ? unread : state.status === 'completing' ? 'completed' : state.status
  // Completed, its answer standing, but the delivery it was queued with did not happen: its own outcome, never a
  // retry (run exits 6 then; docs/contract.md §14.4), the reason as the job's error.
  const delivery = status === 'completed' ? deliveryOf(state) : null
  if (undelivered(delivery))
    return { outcome: 'undelivered', error: `not delivered: ${delivery?.refused ?? ''}`.replace(/^not delivered: not delivered/, 'not delivered') }
  return { outcome: status, error: status === 'completed' ? null : (state?.error ?? null) }
}
