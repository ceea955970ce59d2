// Payment terms and due dates. Dates are UTC midnights: an invoice has no time of day.

const TERMS = {
  net14: { days: 14 },
  net30: { days: 30 },
  net60: { days: 60 },
  eom: { endOfMonth: true },
}

/** Parses YYYY-MM-DD into a UTC date, refusing dates that do not exist (2024-02-30). */
export function parseDate(text) {
  const match = /^(\d{4})-(\d{2})-(\d{2})$/.exec(text ?? '')
  if (!match) throw new SyntaxError(`dates are YYYY-MM-DD, got ${JSON.stringify(text)}`)
  const [, y, m, d] = match.map(Number)
  const date = new Date(Date.UTC(y, m - 1, d))
  if (date.getUTCFullYear() !== y || date.getUTCMonth() !== m - 1 || date.getUTCDate() !== d) {
    throw new RangeError(`${text} is not a date`)
  }
  return date
}

/** Adds whole days to a UTC date. */
export function addDays(date, days) {
  return new Date(date.getTime() + days * 86_400_000)
}

/** The last day of the date's month. */
export function endOfMonth(date) {
  return new Date(Date.UTC(date.getUTCFullYear(), date.getUTCMonth() + 1, 0))
}

/**
 * The due date for payment terms: net<N> is N days after issue; eom is the end of
 * the month after the month of issue (an invoice of 31 January is due 29 February in
 * a leap year).
 */
export function dueDate(issued, terms = 'net30') {
  const rule = TERMS[terms]
  if (!rule) throw new RangeError(`unknown terms ${terms}; use ${Object.keys(TERMS).join(', ')}`)
  if (rule.endOfMonth) return endOfMonth(new Date(Date.UTC(issued.getUTCFullYear(), issued.getUTCMonth() + 1, 1)))
  return addDays(issued, rule.days)
}

/** Whole days from `from` to `to` (negative when `to` is earlier). */
export function daysBetween(from, to) {
  return Math.round((to.getTime() - from.getTime()) / 86_400_000)
}

/** "overdue by N days", "due today" or "due in N days", relative to `today`. */
export function dueStatus(due, today) {
  const days = daysBetween(today, due)
  if (days < 0) return `overdue by ${-days} day${days === -1 ? '' : 's'}`
  if (days === 0) return 'due today'
  return `due in ${days} day${days === 1 ? '' : 's'}`
}
