import type { Config } from '../config/schema.js'
import type { Layout, Location } from '../storage/fs/layout.js'
import type { TaskIndex } from '../storage/index/task-index.js'
import { sqliteFacts } from '../storage/index/pull-requests.js'
import type { PullRequestFacts } from '../storage/index/pull-requests.js'
import { parsePullUrl } from '../sources/pull-facts.js'
import { costOf, modelOf, splitFromState } from './tokens.js'
import type { TokenSplit } from './tokens.js'

/** One pull/merge request ctxagent opened, and its fate (docs/contract.md §17). */
export interface PullOutcome {
  url: string
  forge: 'github' | 'gitlab' | null
  repository: string | null
  number: number | null
  /** The task that opened it, and its user and model; the trigger label where a poller knows it. */
  task: string
  user: string | null
  model: string | null
  label: string | null
  opened_at: string
  /** Every task on it, the opener first, then the follow-ups by creation. */
  tasks: string[]
  /** Follow-ups: the tasks on it other than the one that opened it. */
  rounds: number
  /** open, merged or closed (unmerged); open also when the forge was not asked yet (`refreshed_at` null). */
  outcome: 'open' | 'merged' | 'closed'
  merged_at: string | null
  merged_by: string | null
  closed_at: string | null
  closed_by: string | null
  first_response_at: string | null
  hours_to_first_response: number | null
  hours_to_merge: number | null
  /** Commits on it that no task's delivery pushed (people's own, before the merge); null: its commits are not known yet. */
  human_commits: number | null
  rework: boolean | null
  /** USD over every task on it at config pricing, as stats counts it; null when none of them has a price. */
  usd: number | null
  unpriced_tasks: number
  refreshed_at: string | null
}

interface PrTaskRow {
  uuid: string
  location: Location
  user: string | null
  created_at: string
  metadata: string | null
  pr_url: string
  pr_opened: number | null
  delivery_commit: string | null
  total_tokens: number | null
  prompt_tokens: number | null
  completion_tokens: number | null
  cached_tokens: number | null
  cache_write_tokens: number | null
}

/**
 * Every request a task of the tree opened, with the tasks on it and the forge's facts as
 * last refreshed. A request is counted once it was opened by a task (`pr_opened`); one only
 * followed up on (a person's PR given to a task) is not ctxagent's to count.
 */
export function collectOutcomes(index: TaskIndex, layout: Layout, pricing: Config['pricing']): PullOutcome[] {
  const rows = index.db
    .prepare(
      `SELECT uuid, location, user, created_at, metadata, pr_url, pr_opened, delivery_commit, total_tokens, prompt_tokens, completion_tokens, cached_tokens, cache_write_tokens
       FROM tasks WHERE pr_url IS NOT NULL ORDER BY created_at, uuid`,
    )
    .all() as PrTaskRow[]
  const facts = new Map(sqliteFacts(index.db).map((f) => [f.url, f]))
  const byUrl = new Map<string, PrTaskRow[]>()
  for (const row of rows) byUrl.set(row.pr_url, [...(byUrl.get(row.pr_url) ?? []), row])
  const outcomes: PullOutcome[] = []
  for (const [url, tasks] of byUrl) {
    const opener = tasks.find((t) => t.pr_opened === 1)
    if (opener === undefined) continue
    outcomes.push(outcomeOf(url, opener, tasks, facts.get(url) ?? null, layout, pricing))
  }
  return outcomes.sort((a, b) => (a.opened_at < b.opened_at ? -1 : a.opened_at > b.opened_at ? 1 : a.url < b.url ? -1 : 1))
}

function outcomeOf(
  url: string,
  opener: PrTaskRow,
  tasks: PrTaskRow[],
  facts: PullRequestFacts | null,
  layout: Layout,
  pricing: Config['pricing'],
): PullOutcome {
  const ordered = [opener, ...tasks.filter((t) => t !== opener)]
  let usd: number | null = null
  let unpriced = 0
  for (const task of ordered) {
    const cost = costOf(modelOf(task.metadata), splitOf(task, layout), pricing)
    if (cost === null) unpriced++
    else usd = Math.round(((usd ?? 0) + cost) * 1e6) / 1e6
  }
  const delivered = new Set(ordered.map((t) => t.delivery_commit).filter((c): c is string => c !== null))
  const known = facts !== null
  const human = known ? facts.commits.filter((c) => !delivered.has(c)).length : null
  const outcome = facts?.state ?? 'open'
  const opened = facts?.created_at ?? opener.created_at
  const pull = parsePullUrl(url)
  return {
    url,
    forge: pull?.forge ?? null,
    repository: pull?.repository ?? null,
    number: pull?.number ?? null,
    task: opener.uuid,
    user: opener.user,
    model: modelOf(opener.metadata),
    label: facts?.label ?? null,
    opened_at: opened,
    tasks: ordered.map((t) => t.uuid),
    rounds: ordered.length - 1,
    outcome,
    merged_at: facts?.merged_at ?? null,
    merged_by: facts?.merged_by ?? null,
    closed_at: facts?.closed_at ?? null,
    closed_by: facts?.closed_by ?? null,
    first_response_at: facts?.first_response_at ?? null,
    hours_to_first_response: hoursBetween(opened, facts?.first_response_at ?? null),
    hours_to_merge: outcome === 'merged' ? hoursBetween(opened, facts?.merged_at ?? null) : null,
    human_commits: human,
    rework: human === null ? null : human > 0,
    usd,
    unpriced_tasks: unpriced,
    refreshed_at: facts?.refreshed_at ?? null,
  }
}

/** A task's split from its row, or from its state.json for a row indexed before the split (as stats reads it). */
function splitOf(row: PrTaskRow, layout: Layout): TokenSplit {
  if (row.prompt_tokens === null) return splitFromState(layout, row)
  return {
    total: row.total_tokens ?? 0,
    prompt: row.prompt_tokens,
    completion: row.completion_tokens ?? 0,
    cached: row.cached_tokens ?? 0,
    cache_write: row.cache_write_tokens ?? 0,
  }
}

function hoursBetween(from: string, to: string | null): number | null {
  if (to === null) return null
  const ms = Date.parse(to) - Date.parse(from)
  return Number.isFinite(ms) ? Math.round((ms / 3_600_000) * 1000) / 1000 : null
}
