import type { TaskState } from '../../storage/task/state.js'

/** fleet.retry: how a task paused by a passing LLM failure is run again. */
export interface RetryPolicy {
  base_seconds: number
  max_seconds: number
  max_attempts: number
  /** A job waiting out usage limits waits at most this long in all (default 24); waits spend no attempt (docs/fleet-operations.md#waits). */
  max_wait_hours?: number
}

/** Paused by its LLM failing in a way that may pass (state.llm_failure); a task from before that field, paused by the LLM, counts too. */
export function llmOutage(state: TaskState | null): boolean {
  return state?.paused_by === 'llm' && (state.llm_failure === undefined || state.llm_failure !== null)
}

/** base × 2^(attempt−1), at most max, then between half of it and all of it (jitter: retries of one outage spread out). */
export function backoffSeconds(policy: RetryPolicy, attempt: number, random: () => number = Math.random): number {
  const full = Math.min(policy.max_seconds, policy.base_seconds * 2 ** Math.max(0, attempt - 1))
  return full / 2 + (full / 2) * random()
}
