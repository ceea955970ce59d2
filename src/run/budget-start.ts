import type { Config } from '../config/schema.js'
import { CtxError } from '../errors.js'
import { CAP_KEYS, capReset, dayKey, passedSharedCap, priceOf, requestEstimate, sharedCaps, taskSpend, usd } from '../operations/budgets.js'
import type { IndexStore } from '../storage/index/store.js'
import { windowTokens } from '../storage/format/tokens.js'
import type { TaskState } from '../storage/task/state.js'

/** A cost cap already spent, before anything ran: exit 5, in the one-line form of every refusal. */
export class BudgetSpentError extends CtxError {
  constructor(message: string, hint: string) {
    super(message, { exitCode: 5, hint })
  }
}

/** What is known of a task about to start (state null) or be resumed. */
export interface StartingTask {
  user: string
  model: string
  /** A resumed task's state (its spend and window); null for a new task. */
  state: TaskState | null
  uuid: string | null
  maxCostUsd: number | null
  /** The prompt tokens of its first request: firstPromptTokens. */
  promptTokens: number
}

/**
 * The prompt tokens of a task's first request, as the check at start (and the fleet's claim) sizes it
 * (docs/running.md#budgets): a resumed task's window as it stopped (state.json's current_context_tokens);
 * a new task's system prompt and statement, what its first request sends before anything the task reads.
 */
export function firstPromptTokens(start: { state: Pick<TaskState, 'current_context_tokens'> } | { system: string; text: string }): number {
  if ('state' in start) return start.state.current_context_tokens ?? 0
  return windowTokens([{ content: start.system }, { content: start.text }])
}

/**
 * Refuses, before anything is written, a task whose cost cap is spent
 * (docs/running.md#budgets): one line naming the cap, and for a user's or the fleet's
 * cap when it resets; exit 5. Spent means that its first request would pass it: its
 * prompt (firstPromptTokens) at the prompt rate plus llm.max_output_tokens at the
 * completion rate, the estimate the check before that request makes. So a task is never
 * created only to pause before its first turn. A model without a price is not capped by money.
 */
export async function refuseSpentBudget(index: IndexStore | null, config: Config, task: StartingTask, now: Date): Promise<void> {
  const price = priceOf(config, task.model)
  if (price === null) return
  // Every request asks for max_output_tokens: a cap without room for that much is as good as spent.
  const first = requestEstimate(price, task.promptTokens, config.llm.max_output_tokens)
  if (task.maxCostUsd !== null) {
    const spent = task.state === null ? 0 : taskSpend(task.state, task.model, config.pricing)
    if (spent + first > task.maxCostUsd) {
      const enough = Math.ceil((spent + first) * 100 + 1) / 100
      if (task.state === null)
        throw new BudgetSpentError(
          `the task's cost cap (${CAP_KEYS.task}: ${usd(task.maxCostUsd)}) cannot cover its first request, which may cost ${usd(first)}`,
          `give it at least --max-cost ${enough}`,
        )
      throw new BudgetSpentError(
        `task ${task.uuid}'s cost cap (${CAP_KEYS.task}: ${usd(task.maxCostUsd)}) is spent: ${usd(spent)} spent, its next request may cost ${usd(first)}`,
        `raise it to continue: ctxagent run --resume ${task.uuid?.slice(0, 8) ?? ''} --max-cost ${enough}`,
      )
    }
  }
  const caps = sharedCaps(config, task.user)
  if (index === null || (caps.userDaily === null && caps.userMonthly === null && caps.fleetDaily === null)) return
  let totals: Awaited<ReturnType<IndexStore['spendTotals']>>
  try {
    totals = await index.spendTotals(task.user, dayKey(now, config.budgets.timezone))
  } catch {
    // The index is away (a database outage): the task starts, and its check before each request says so.
    return
  }
  const passed = passedSharedCap(caps, totals, first)
  if (passed === null) return
  const reset = capReset(passed.cap, now, config.budgets.timezone)?.toISOString()
  const whose = passed.cap === 'fleet-daily' ? "everyone's spend today" : `${task.user}'s spend ${passed.cap === 'user-daily' ? 'today' : 'this month'}`
  const raise =
    passed.cap === 'fleet-daily'
      ? CAP_KEYS[passed.cap]
      : `${CAP_KEYS[passed.cap]} (users.${task.user}.budgets.${passed.cap === 'user-daily' ? 'user_daily_usd' : 'user_monthly_usd'} for this user alone)`
  throw new BudgetSpentError(
    `the ${passed.cap} cost cap (${CAP_KEYS[passed.cap]}: ${usd(passed.limit)}) is spent: ${whose} is ${usd(passed.spent)}${passed.spent < passed.limit ? `, and a request may cost ${usd(first)}` : ''}; it resets at ${reset}`,
    `start it after the reset, or raise ${raise}`,
  )
}
