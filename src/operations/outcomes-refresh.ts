import type { Config } from '../config/schema.js'
import type { Layout } from '../storage/fs/layout.js'
import type { IndexStore } from '../storage/index/store.js'
import type { PullRequestFacts } from '../storage/index/pull-requests.js'
import { parsePullUrl, pullFacts } from '../sources/pull-facts.js'
import { collectOutcomes } from './outcomes.js'

export interface RefreshReport {
  /** Requests whose facts were fetched and written. */
  refreshed: string[]
  /** Requests already ended (their facts are final): not asked again. */
  ended: number
  /** One line per request the forge did not answer for: the others are refreshed all the same. */
  errors: string[]
}

export interface RefreshOptions {
  now: Date
  /** The trigger label `poll` queued each opener's issue under, by the opener's task uuid (a poller knows it). */
  labels?: ReadonlyMap<string, string>
  /** Only the requests on these repositories (`owner/repo`, `group/project`) of this forge: a poller's own. */
  only?: { forge: 'github' | 'gitlab'; repository: string }
  stop?: AbortSignal
}

/**
 * Asks the forge for the facts of every request ctxagent opened that has not ended (merged
 * or closed: final, never asked again), and writes them to the index (docs/contract.md §17).
 * One request the forge fails for is a line in `errors`; the others are written.
 */
export async function refreshOutcomes(store: IndexStore, layout: Layout, config: Config, options: RefreshOptions): Promise<RefreshReport> {
  const { db, owned } = await store.reporting()
  let pulls
  try {
    pulls = collectOutcomes(db, layout, config.pricing)
  } finally {
    if (!owned) db.close()
  }
  const report: RefreshReport = { refreshed: [], ended: 0, errors: [] }
  const written: PullRequestFacts[] = []
  for (const pull of pulls) {
    const where = parsePullUrl(pull.url)
    if (where === null) {
      report.errors.push(`${pull.url}: not a GitHub pull request's or a GitLab merge request's URL`)
      continue
    }
    if (options.only && (where.forge !== options.only.forge || where.repository !== options.only.repository)) continue
    const label = options.labels?.get(pull.task) ?? pull.label
    if (pull.outcome !== 'open') {
      report.ended++
      continue
    }
    try {
      const facts = await pullFacts(config, where, options.stop)
      written.push({ url: pull.url, ...facts, label, refreshed_at: options.now.toISOString() })
      report.refreshed.push(pull.url)
    } catch (err) {
      if (options.stop?.aborted) throw err
      report.errors.push(`${pull.url}: ${(err as Error).message}`)
    }
  }
  await store.setPullRequestFacts(written)
  return report
}
