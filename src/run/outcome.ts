import type { BudgetCap, Delivery } from '../storage/task/state.js'
import type { DeliveryResult } from '../storage/task/delivery.js'
import { deliveryText } from './delivery-step.js'

/** What `run` prints at the end (docs/contract.md §12.5) and the exit code it implies (docs/contract.md §9, §12.3). */
export interface Outcome {
  uuid: string
  status: string
  location: string
  dir: string
  turns: number
  tokens: number
  duration_ms: number
  final_answer: string | null
  finish_status: 'done' | 'blocked' | null
  error: string | null
  inherited_from: string | null
  exit_code: number
  /** The change's delivery (docs/delivery.md): absent when none was asked for. */
  delivery?: Delivery | null
  /** How it ended (docs/delivery.md#what-is-recorded); with `delivery`. */
  delivery_result?: DeliveryResult
  /**
   * A paused task's (docs/running.md#budgets, #rate-limits): who paused it (state.paused_by), when it may go on by
   * itself (a usage limit lifts, a budget window resets; else null) and which cost cap paused it (else null).
   */
  paused_by?: string
  resume_at?: string | null
  budget_cap?: BudgetCap | null
}

/** The outcome comment: the answer, or why it stopped. */
export function outcomeText(o: Pick<Outcome, 'uuid' | 'status' | 'finish_status' | 'turns' | 'final_answer' | 'error' | 'delivery'>): string {
  const head = `**ctxagent** task \`${o.uuid}\` ${o.status}${o.finish_status === 'blocked' ? ' (blocked)' : ''} after ${o.turns} turn(s).`
  if (o.status === 'completed') return `${head}\n\n${o.final_answer ?? ''}\n\n${deliveryText(o.delivery)}`.trim()
  if (o.status === 'paused') return `${head}\n\n${o.error ? `Why: ${o.error}\n\n` : ''}It continues with \`ctxagent run --resume ${o.uuid}\`.`
  return `${head}\n\nWhy: ${o.error ?? 'unknown'}`
}
