import type { PullOutcome } from './outcomes.js'

export const OUTCOME_GROUPS = ['model', 'repository', 'user', 'label'] as const
export type OutcomeGroup = (typeof OUTCOME_GROUPS)[number]

/** The figures of a set of pull/merge requests (docs/contract.md §17). */
export interface OutcomeFigures {
  opened: number
  merged: number
  closed: number
  /** Still open: apart, counted neither as merged nor as failed. */
  open: number
  /** merged / (merged + closed): of the requests that reached an end; null when none has. */
  merge_rate: number | null
  /** USD spent on merged and closed requests (every task on them, follow-ups included) per merged one; null when none merged or none is priced. */
  usd_per_merged: number | null
  /** USD by outcome, over every task on the requests; null where none is priced. */
  usd: { merged: number | null; closed: number | null; open: number | null }
  median_hours_to_merge: number | null
  median_hours_to_first_response: number | null
  /** Follow-ups per merged request. */
  rounds_per_merged: number | null
  /** Merged requests that carry commits of people's own (rework before the merge). */
  reworked: number
}

export interface OutcomeRow extends OutcomeFigures {
  /** The group's value (a model, a repository, a user, a label); null: not known. */
  key: string | null
}

export interface OutcomesReport {
  since: string | null
  by: OutcomeGroup
  total: OutcomeFigures
  groups: OutcomeRow[]
  pull_requests: PullOutcome[]
}

/** The report over the requests opened on or after `since`, grouped by one dimension. */
export function outcomesReport(all: readonly PullOutcome[], by: OutcomeGroup, since: Date | null): OutcomesReport {
  const pulls = since === null ? [...all] : all.filter((p) => Date.parse(p.opened_at) >= since.getTime())
  const groups = new Map<string | null, PullOutcome[]>()
  for (const p of pulls) groups.set(p[by], [...(groups.get(p[by]) ?? []), p])
  const rows = [...groups]
    .map(([key, members]) => ({ key, ...figures(members) }))
    .sort((a, b) => b.opened - a.opened || String(a.key).localeCompare(String(b.key)))
  return { since: since?.toISOString() ?? null, by, total: figures(pulls), groups: rows, pull_requests: pulls }
}

export function figures(pulls: readonly PullOutcome[]): OutcomeFigures {
  const of = (outcome: PullOutcome['outcome']) => pulls.filter((p) => p.outcome === outcome)
  const merged = of('merged')
  const closed = of('closed')
  const ended = merged.length + closed.length
  const spent = (set: readonly PullOutcome[]): number | null =>
    set.some((p) => p.usd !== null)
      ? round(
          set.reduce((sum, p) => sum + (p.usd ?? 0), 0),
          6,
        )
      : null
  const endedUsd = spent([...merged, ...closed])
  return {
    opened: pulls.length,
    merged: merged.length,
    closed: closed.length,
    open: of('open').length,
    merge_rate: ended === 0 ? null : round(merged.length / ended, 4),
    usd_per_merged: merged.length === 0 || endedUsd === null ? null : round(endedUsd / merged.length, 6),
    usd: { merged: spent(merged), closed: spent(closed), open: spent(of('open')) },
    median_hours_to_merge: median(merged.map((p) => p.hours_to_merge)),
    median_hours_to_first_response: median(pulls.map((p) => p.hours_to_first_response)),
    rounds_per_merged: merged.length === 0 ? null : round(merged.reduce((n, p) => n + p.rounds, 0) / merged.length, 4),
    reworked: merged.filter((p) => p.rework === true).length,
  }
}

function median(values: readonly (number | null)[]): number | null {
  const known = values.filter((v): v is number => v !== null).sort((a, b) => a - b)
  if (known.length === 0) return null
  const mid = Math.floor(known.length / 2)
  return round(known.length % 2 === 1 ? (known[mid] as number) : ((known[mid - 1] as number) + (known[mid] as number)) / 2, 3)
}

function round(n: number, places: number): number {
  const f = 10 ** places
  return Math.round(n * f) / f
}
