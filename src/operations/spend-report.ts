import type { Config } from '../config/schema.js'
import type { IndexStore } from '../storage/index/store.js'
import type { SpendRow } from '../storage/index/spend.js'
import { capReset, dayKey, sharedCaps, usd } from './budgets.js'

/**
 * Spend against the caps (docs/running.md#budgets), for `stats`, `stats --check`, the
 * page and `doctor`: the index's spend per user per day, and each shared cap with what
 * its window has spent so far.
 */

export interface CapStatus {
  cap: 'user-daily' | 'user-monthly' | 'fleet-daily'
  /** The user whose cap it is; null for the fleet's. */
  user: string | null
  spent: number
  limit: number
  /** spent / limit. */
  share: number
  /** When its window resets (ISO 8601). */
  resets_at: string
}

export interface SpendReport {
  timezone: string
  /** Today's key in budgets.timezone. */
  today: string
  /** Spend per user per day in the range asked for, oldest first. */
  days: SpendRow[]
  /** Every shared cap that applies to a user with spend this month (and the fleet's), with its window's spend. */
  caps: CapStatus[]
}

/** Days shown when no range is given: the last week. */
const DEFAULT_DAYS = 7

/**
 * The spend report, from the index (the only record of spend per day); `from`/`to` and
 * `user` narrow the days listed, never the caps (a cap is judged on its whole window).
 */
export async function collectSpend(
  store: IndexStore,
  config: Config,
  now: Date,
  range: { from?: Date | undefined; to?: Date | undefined; user?: string | undefined } = {},
): Promise<SpendReport> {
  const tz = config.budgets.timezone
  const today = dayKey(now, tz)
  const from = dayKey(range.from ?? new Date(now.getTime() - (DEFAULT_DAYS - 1) * 86_400_000), tz)
  // --to is exclusive (the next day's start for a day): its last millisecond is the last day.
  const to = range.to === undefined ? today : dayKey(new Date(range.to.getTime() - 1), tz)
  const listed = (await store.spendByDay(from, to)).filter((r) => range.user === undefined || r.user === range.user)
  const month = await store.spendByDay(`${today.slice(0, 7)}-01`, `${today.slice(0, 7)}-31`)
  const users = new Set([...month.map((r) => r.user), ...Object.keys(config.users)])
  const caps: CapStatus[] = []
  const status = (cap: CapStatus['cap'], user: string | null, spent: number, limit: number | null) => {
    if (limit === null) return
    caps.push({ cap, user, spent: round(spent), limit, share: round(spent / limit), resets_at: (capReset(cap, now, tz) as Date).toISOString() })
  }
  for (const user of [...users].sort()) {
    const own = sharedCaps(config, user)
    const rows = month.filter((r) => r.user === user)
    status(
      'user-daily',
      user,
      rows.filter((r) => r.day === today).reduce((s, r) => s + r.usd, 0),
      own.userDaily,
    )
    status(
      'user-monthly',
      user,
      rows.reduce((s, r) => s + r.usd, 0),
      own.userMonthly,
    )
  }
  status(
    'fleet-daily',
    null,
    month.filter((r) => r.day === today).reduce((s, r) => s + r.usd, 0),
    config.budgets.fleet_daily_usd,
  )
  return { timezone: tz, today, days: listed.map((r) => ({ ...r, usd: round(r.usd) })), caps }
}

/** An alert of `stats --check` (stats.ts's Alert) about a cap. */
export interface BudgetAlert {
  level: 'warning' | 'critical'
  metric: 'budget'
  value: number
  threshold: number
  message: string
}

/** `stats --check`: a cap at budgets.warn_at of its limit is a warning, at its limit critical. */
export function capAlerts(report: SpendReport, warnAt: number): BudgetAlert[] {
  const alerts: BudgetAlert[] = []
  for (const c of report.caps) {
    const level = c.spent >= c.limit ? 'critical' : c.share >= warnAt ? 'warning' : null
    if (level === null) continue
    const whose = c.user === null ? 'the fleet' : `user ${c.user}`
    const what = `${whose}'s ${c.cap.replace(/^(user|fleet)-/, '')} spend ${usd(c.spent)} is ${(c.share * 100).toFixed(0)}% of its ${c.cap} cap ${usd(c.limit)}`
    alerts.push({
      level,
      metric: 'budget',
      value: c.share,
      threshold: level === 'critical' ? 1 : warnAt,
      message: `${what}${level === 'critical' ? `: its tasks pause until ${c.resets_at}` : ''}`,
    })
  }
  return alerts
}

function round(n: number): number {
  return Math.round(n * 1e6) / 1e6
}
