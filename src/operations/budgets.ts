import type { Config } from '../config/schema.js'
import type { BudgetCap, TaskState } from '../storage/task/state.js'
import { taskBill } from './tokens.js'

/**
 * Spend caps in USD (docs/running.md#budgets): which apply to a user's task, what a
 * request may cost, and the windows (a day, a month) the shared caps count in. Days and
 * months begin at midnight in budgets.timezone (UTC by default). Pure: every function
 * takes the time it is asked about.
 */

export type ModelPrice = Config['pricing'][string]

/** The caps of one task: USD, or null where none applies. */
export interface Caps {
  task: number | null
  userDaily: number | null
  userMonthly: number | null
  fleetDaily: number | null
}

/** The config keys that set each cap, for messages. */
export const CAP_KEYS: Record<BudgetCap, string> = {
  task: 'run.max_cost_usd (--max-cost)',
  'user-daily': 'budgets.user_daily_usd',
  'user-monthly': 'budgets.user_monthly_usd',
  'fleet-daily': 'budgets.fleet_daily_usd',
}

/** The shared caps a user's tasks count against: users.<name>.budgets over budgets (null there: no cap). */
export function sharedCaps(config: Config, user: string): Omit<Caps, 'task'> {
  const own = Object.hasOwn(config.users, user) ? config.users[user]?.budgets : undefined
  return {
    userDaily: own?.user_daily_usd !== undefined ? own.user_daily_usd : config.budgets.user_daily_usd,
    userMonthly: own?.user_monthly_usd !== undefined ? own.user_monthly_usd : config.budgets.user_monthly_usd,
    fleetDaily: config.budgets.fleet_daily_usd,
  }
}

/** The price of a model (pricing.<model>), or null: a model without one is not capped by money. */
export function priceOf(config: Config, model: string): ModelPrice | null {
  return Object.hasOwn(config.pricing, model) ? (config.pricing[model] as ModelPrice) : null
}

/** The most a request may cost: its prompt tokens at the prompt rate, its max_tokens at the completion rate. */
export function requestEstimate(price: ModelPrice, promptTokens: number, maxTokens: number): number {
  return (promptTokens * price.prompt + maxTokens * price.completion) / 1_000_000
}

/** What a task has cost so far, from its recorded tokens: its bill (taskBill), the turns, the compactions and the final summary. */
export function taskSpend(state: TaskState, model: string, pricing: Config['pricing']): number {
  return taskBill(model, state, pricing) ?? 0
}

const formats = new Map<string, Intl.DateTimeFormat>()

/** The calendar date and time of `at` in `tz`, as numbers. */
function zoned(at: Date, tz: string): { y: number; m: number; d: number; h: number; min: number; s: number } {
  if (tz === 'UTC')
    return { y: at.getUTCFullYear(), m: at.getUTCMonth() + 1, d: at.getUTCDate(), h: at.getUTCHours(), min: at.getUTCMinutes(), s: at.getUTCSeconds() }
  let format = formats.get(tz)
  if (format === undefined) {
    format = new Intl.DateTimeFormat('en-US', {
      timeZone: tz,
      hourCycle: 'h23',
      year: 'numeric',
      month: 'numeric',
      day: 'numeric',
      hour: 'numeric',
      minute: 'numeric',
      second: 'numeric',
    })
    formats.set(tz, format)
  }
  const parts = Object.fromEntries(format.formatToParts(at).map((p) => [p.type, Number(p.value)]))
  return {
    y: parts.year as number,
    m: parts.month as number,
    d: parts.day as number,
    h: parts.hour as number,
    min: parts.minute as number,
    s: parts.second as number,
  }
}

/** The instant at which the calendar date y-m-d begins in `tz` (months and days past their end roll over). */
function midnight(y: number, m: number, d: number, tz: string): Date {
  const wall = Date.UTC(y, m - 1, d)
  if (tz === 'UTC') return new Date(wall)
  // The zone's offset at a guess, twice: the second guess lands on the right side of a DST change.
  const offset = (t: number) => {
    const z = zoned(new Date(t), tz)
    return Date.UTC(z.y, z.m - 1, z.d, z.h, z.min, z.s) - Math.floor(t / 1000) * 1000
  }
  let t = wall - offset(wall)
  t = wall - offset(t)
  return new Date(t)
}

const pad = (n: number, width = 2) => String(n).padStart(width, '0')

/** The day `at` falls on in `tz`: `YYYY-MM-DD` (the key of the index's spend per day). */
export function dayKey(at: Date, tz: string): string {
  const z = zoned(at, tz)
  return `${pad(z.y, 4)}-${pad(z.m)}-${pad(z.d)}`
}

/** When the day of `at` ends in `tz`: the next midnight there. */
export function nextDayStart(at: Date, tz: string): Date {
  const z = zoned(at, tz)
  return midnight(z.y, z.m, z.d + 1, tz)
}

/** When the month of `at` ends in `tz`: the first of the next month, at midnight there. */
export function nextMonthStart(at: Date, tz: string): Date {
  const z = zoned(at, tz)
  return midnight(z.y, z.m + 1, 1, tz)
}

/** When a cap's window resets after `at`; null for the task's cap, which has no window. */
export function capReset(cap: BudgetCap, at: Date, tz: string): Date | null {
  if (cap === 'task') return null
  return cap === 'user-monthly' ? nextMonthStart(at, tz) : nextDayStart(at, tz)
}

/** USD as people read it: cents, or four decimals below a dollar's cent. */
export function usd(amount: number): string {
  return Math.abs(amount) < 0.01 && amount !== 0 ? `$${amount.toFixed(4)}` : `$${amount.toFixed(2)}`
}

/** The spend figures a shared cap is judged by. */
export interface SharedSpend {
  user_day: number
  user_month: number
  fleet_day: number
}

/** The first shared cap that `extra` more would pass (or that is already reached, with extra 0), else null. */
export function passedSharedCap(caps: Omit<Caps, 'task'>, spend: SharedSpend, extra: number): { cap: BudgetCap; spent: number; limit: number } | null {
  const checks: [BudgetCap, number | null, number][] = [
    ['user-daily', caps.userDaily, spend.user_day],
    ['user-monthly', caps.userMonthly, spend.user_month],
    ['fleet-daily', caps.fleetDaily, spend.fleet_day],
  ]
  for (const [cap, limit, spent] of checks) {
    if (limit === null) continue
    if (extra > 0 ? spent + extra > limit : spent >= limit) return { cap, spent, limit }
  }
  return null
}
