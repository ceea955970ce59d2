import type { Config } from '../../config/schema.js'
import { activeEndpoint } from '../../config/endpoint.js'
import { dayKey, nextDayStart, nextMonthStart, priceOf, requestEstimate, sharedCaps } from '../../operations/budgets.js'
import { effectiveConfig } from '../../run/settings.js'
import { claimNeedSql, monthRange } from '../../storage/index/spend.js'

/**
 * The shared cost caps as the claim knows them (docs/fleet-operations.md#waits): a job
 * whose user's daily or monthly cap, or the fleet's daily cap, is spent by the index's
 * `user_spend` is not handed out; it waits, holding no slot, until the window resets.
 *
 * "Spent" is what `run` refuses to start with: the spend plus the most a first request
 * may cost (no context yet: llm.max_output_tokens at the completion rate of the user's
 * model) would pass the cap. So each cap is handed to the claim as a threshold, the cap
 * less that request, and the claim compares the spend with it in SQL, with no round trip
 * of its own. A model without a price is not capped by money: its user has no threshold.
 */
export interface ClaimBudget {
  /** The day (budgets.timezone) whose spend counts, and the month's first and last day keys. */
  day: string
  from: string
  to: string
  /** When the day's and the month's windows reset. */
  daily_until: string
  monthly_until: string
  /** Thresholds (USD) for every user not named in users.*, then for each one named; null: no cap. */
  all: Thresholds
  users: Record<string, Thresholds>
  /** The user a job without one runs as: the worker's OS user, which its `run` takes for the task's (its caps, its spend). */
  os_user: string
}

export interface Thresholds {
  daily: number | null
  monthly: number | null
  fleet: number | null
  /** USD per prompt token of the user's model: a resume's window is counted at it (spend.ts claimNeedSql); null: no price. */
  prompt: number | null
}

/**
 * The claim's budget figures at a given time, or null when no shared cap is configured (the
 * claim then reads no spend). The thresholds are worked out once, from the config; the
 * day and the resets at each call. `osUser`: the worker's OS user, whose a job without a
 * user is (`run` without --user runs the task for it).
 */
export function claimBudget(config: Config, osUser: string): ((now: Date) => ClaimBudget) | null {
  const b = config.budgets
  const anyUserCap = Object.values(config.users).some((u) => u?.budgets?.user_daily_usd != null || u?.budgets?.user_monthly_usd != null)
  if (b.user_daily_usd === null && b.user_monthly_usd === null && b.fleet_daily_usd === null && !anyUserCap) return null
  const tz = b.timezone
  const users: Record<string, Thresholds> = {}
  for (const name of Object.keys(config.users)) users[name] = thresholds(config, name, activeEndpoint(effectiveConfig(config, name, {})).model)
  const all = thresholds(config, '', activeEndpoint(config).model)
  // No model in use has a price: nothing is capped by money.
  if ([all, ...Object.values(users)].every((t) => t.daily === null && t.monthly === null && t.fleet === null)) return null
  return (now) => {
    const day = dayKey(now, tz)
    const [from, to] = monthRange(day)
    return {
      day,
      from,
      to,
      daily_until: nextDayStart(now, tz).toISOString(),
      monthly_until: nextMonthStart(now, tz).toISOString(),
      all,
      users,
      os_user: osUser,
    }
  }
}

function thresholds(config: Config, user: string, model: string): Thresholds {
  const price = priceOf(config, model)
  if (price === null) return { daily: null, monthly: null, fleet: null, prompt: null }
  const caps = sharedCaps(config, user)
  // The estimate run's check at start makes (run/budget-start.ts), its prompt apart: a resume's window is the claim's to add.
  const first = requestEstimate(price, 0, config.llm.max_output_tokens)
  const less = (cap: number | null) => (cap === null ? null : cap - first)
  return { daily: less(caps.userDaily), monthly: less(caps.userMonthly), fleet: less(caps.fleetDaily), prompt: requestEstimate(price, 1, 0) }
}

/**
 * SQL: the cap spent for the job row `job` (its user; NULL: the worker's OS user, as its `run`
 * takes it), by the ClaimBudget in `param` (a jsonb parameter), or NULL: the month's first, then
 * the day's, then the fleet's (storage/index/spend.ts's fleet_spent_cap, one read of user_spend's
 * key), `fleet` the fleet's spend today (read once by the claim). A resume's window counts at
 * the prompt rate (claimNeedSql), as `run`'s check at start counts it.
 */
export function spentCapSql(job: string, param: string, fleet: string): string {
  return `fleet_spent_cap(${userSql(`${job}."user"`, param)}, ${param}, ${fleet}, ${claimNeedSql(job, param)})`
}

/** SQL: the fleet's spend today, by the ClaimBudget in `param` (0 without one). */
export function fleetSpendSql(param: string): string {
  return `(SELECT coalesce(sum(s.usd), 0) FROM user_spend s WHERE ${param} IS NOT NULL AND s.day = ${param}->>'day')`
}

/** SQL: whether the fleet's daily cap applies to a job's user (null for a user whose model has no price); true when the claim has no figures. */
export function fleetCappedSql(job: string, param: string): string {
  return `(${param} IS NULL OR (${capsSql(job, param)}->>'fleet') IS NOT NULL)`
}

/** SQL: the user a job runs as (a job without one: the worker's OS user). */
function userSql(job: string, param: string): string {
  return `COALESCE(${job}, ${param}->>'os_user')`
}

/** SQL: that user's thresholds (users.<name>, else every other user's). */
function capsSql(job: string, param: string): string {
  return `COALESCE(${param}->'users'->${userSql(job, param)}, ${param}->'all')`
}
