import type { LlmFailure } from '../errors.js'
import { LockLostError } from '../storage/lock/lock.js'
import type { StopReason } from './stop.js'
import type { BudgetCap } from '../storage/task/state.js'

/** How a run of the loop ended; the caller settles the task accordingly. */
export type Ending =
  | { kind: 'completed'; answer: string; finishStatus: 'done' | 'blocked' | null; sessionEnded?: true }
  | { kind: 'timeout'; reason: string }
  | { kind: 'failed'; reason: string }
  | { kind: 'paused'; cause: 'SIGINT' | 'SIGTERM' | 'pause' | 'llm'; error: string | null; failure?: LlmFailure | null }
  /** A cost cap would be passed by the next request, or the API key's usage limit lifts later (docs/running.md#budgets): with when it may go on by itself. */
  | { kind: 'paused'; cause: 'budget' | 'rate-limit'; error: string; resumeAt: Date | null; budgetCap?: BudgetCap; failure?: undefined }
  | { kind: 'lost'; error: LockLostError }

/** The ending a stop request means (a signal, `pause`, the --timeout budget, a lost lock). */
export function endingFor(reason: StopReason, timeoutMs: number | null, dir: string): Ending {
  if (reason === 'timeout') return { kind: 'timeout', reason: `timeout budget: ${formatSpan(timeoutMs ?? 0)} of work reached` }
  if (reason === 'lost') return { kind: 'lost', error: new LockLostError(dir, null) }
  return { kind: 'paused', cause: reason, error: null }
}

function formatSpan(ms: number): string {
  const s = Math.round(ms / 1000)
  if (s < 120) return `${s}s`
  if (s < 7200) return `${Math.round(s / 60)}m`
  return `${Math.floor(s / 3600)}h${Math.round((s % 3600) / 60)}m`
}
