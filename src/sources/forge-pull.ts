/** What the forge says of one pull/merge request (docs/contract.md §17). */
export interface ForgePullFacts {
  state: 'open' | 'merged' | 'closed'
  created_at: string | null
  merged_at: string | null
  merged_by: string | null
  closed_at: string | null
  closed_by: string | null
  /** The first review, comment or note by a person: not the bot's account (`*.bot_name`), not a bot, not a system note. */
  first_response_at: string | null
  /** The request's commit ids, oldest first. */
  commits: string[]
}

/** The earliest of some ISO times, or null. */
export function earliest(times: readonly (string | null | undefined)[]): string | null {
  const known = times.filter((t): t is string => typeof t === 'string' && !Number.isNaN(Date.parse(t)))
  if (known.length === 0) return null
  return known.reduce((a, b) => (Date.parse(b) < Date.parse(a) ? b : a))
}
