import { InvalidArgumentError } from 'commander'
import { parseIsoDate } from '../command-env.js'
import { parseDuration } from '../duration.js'
import { isPrintableName, NAME_RULE } from '../text.js'

// The filters `stats` and `list` both take: --from, --to, --user.

const DAY_ONLY = /^\d{4}-\d{2}-\d{2}$/

/** Words for a whole day, and a duration back from now (2d, 12h, 1h30m), as cleanup's ages are given. */
const DAY_WORDS = new Set(['today', 'yesterday'])
const AGO = /^\d+(\.\d+)?\s*[a-z]/i

/**
 * --from: a day (its start, UTC), `today` or `yesterday` (that day's start, UTC), a
 * duration back from now (`2d`, `12h`), or an ISO time; days that do not exist
 * (2024-02-30) are refused, not rolled over.
 */
export function dateFrom(value: string): Date {
  return dateAt(value, Date.now())
}

/** dateFrom at a given instant (now, in ms). */
export function dateAt(value: string, now: number): Date {
  const word = value.trim().toLowerCase()
  if (DAY_WORDS.has(word)) {
    const today = Math.floor(now / 86_400_000) * 86_400_000
    return new Date(word === 'today' ? today : today - 86_400_000)
  }
  if (AGO.test(word)) {
    try {
      return new Date(now - parseDuration(word, 'the date'))
    } catch {
      // not a duration after all: said below
    }
  }
  const date = parseIsoDate(value, { dayOnly: true })
  if (date === null)
    throw new InvalidArgumentError(
      `'${value.slice(0, 40)}' is not a date like 2024-01-31, today, yesterday, a time ago like 2d or 12h, or an ISO time like 2024-01-31T12:00:00Z`,
    )
  return date
}

/** --to: a day (or today, yesterday) includes all of it (up to the next day's start); a time ago or an ISO time is exact. */
export function dateTo(value: string): Date {
  const date = dateFrom(value)
  return DAY_ONLY.test(value) || DAY_WORDS.has(value.trim().toLowerCase()) ? new Date(date.getTime() + 86_400_000) : date
}

/** --user: the name as `run --user` stores it (trimmed), never empty. */
export function userName(value: string): string {
  const trimmed = value.trim()
  if (!isPrintableName(trimmed)) throw new InvalidArgumentError(`must be ${NAME_RULE}`)
  return trimmed
}
