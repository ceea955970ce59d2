import type { AttemptReason } from './job-history.js'
import type { JobSpec } from './job-spec.js'
import type { RetryPolicy } from './retry-policy.js'

export type JobKind = 'new' | 'resume'
/** docs/contract.md §14.4. waiting, running and retrying are open (a task has at most one open job); the others are finished. */
export const JOB_STATES = ['waiting', 'running', 'retrying', 'done', 'failed', 'cancelled'] as const
export type JobState = (typeof JOB_STATES)[number]
export const OPEN_STATES: readonly JobState[] = ['waiting', 'running', 'retrying']

export interface Job {
  id: number
  task_uuid: string
  kind: JobKind
  spec: JobSpec
  state: JobState
  priority: number
  attempts: number
  claimed_by: string | null
  /** Whose task it is (spec.user, or the OS user who queued it): fleet.limits.per_user counts by it. */
  user: string | null
}

export interface NewJob {
  task_uuid: string
  kind: JobKind
  spec: JobSpec
  priority?: number
  user?: string | null
  /** An idempotency key (enqueue --key): no second open job may hold it. */
  key?: string | null
}

/** The job an idempotency key returned: open, or done within fleet.key_retention_hours. */
export interface KeyHolder {
  id: number
  task_uuid: string
  state: JobState
  finished_at: string | null
}

/** An idle worker's own LISTEN channel, and how long after its last heartbeat it is taken for gone (its row then passed over). */
export interface IdleChannel {
  channel: string
  staleSeconds: number
}

/**
 * One claim of a job: its worker and the attempt it made. A worker acts on a job only in the
 * claim it holds: a later claim of the same job (a pass handed it back while the worker was
 * frozen, and the worker claimed it again) is not ended, retried or released by what the
 * earlier one's child did.
 */
export interface Claim {
  workerId: string
  attempts: number
}

/**
 * A task paused until a known time (docs/fleet-operations.md#waits): a usage limit that
 * lifts (rate-limit), a budget whose window resets (budget, with its cap). Its job waits
 * until then, not claimable before, holding no slot and spending no fleet.retry attempt.
 */
export interface LimitWait {
  until: string
  reason: 'rate-limit' | 'budget'
  cap: string | null
  /** The total a job may wait so (fleet.retry.max_wait_hours, for usage limits); null: no cap (a budget's window is the operator's choice). */
  maxWaitSeconds: number | null
}

/**
 * A job's end: what its task became (outcome), and what follows: its resume queued in the
 * same transaction (`resume`), the job run again later (`retry`, a passing LLM failure),
 * or nothing. `failed` says the job itself failed (its task never ran, or never settled).
 */
export interface JobEnd {
  outcome: string
  error?: string | null
  resume?: boolean
  retry?: RetryPolicy
  /** With `retry`: the next attempt is a new task (a new uuid), the ended one staying as it is (a setup that failed). */
  fresh?: boolean
  failed?: boolean
  /** Its task waits until a known time (a usage limit, a budget window): the job waits with it. */
  wait?: LimitWait
  /** Why the attempt ended, for the job's history (default: from the outcome); `cap` with budget. */
  reason?: AttemptReason
  cap?: string | null
}

/** What became of a job once ended: its new state, and, when retrying, in how many seconds it is due. */
export interface Ended {
  state: JobState
  resumed: boolean
  retry_in: number | null
  /** Waiting out a usage limit or a budget (not a retry: no attempt spent). */
  wait?: 'rate-limit' | 'budget'
}

/** A claim handed back untouched: what its task became, why (its history's reason), and the error. */
export interface HandBack {
  outcome: string
  error: string
  /** killed before the task began; refused by its agent (a cap spent since the claim, a resume that found its task locked). */
  reason: Extract<AttemptReason, 'killed' | 'refused'>
}
