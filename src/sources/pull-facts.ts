import type { Config } from '../config/schema.js'
import type { ForgePullFacts } from './forge-pull.js'

/** A request's forge, repository and number, read from its web URL (as delivery recorded it); null: not a request's URL. */
export function parsePullUrl(url: string): { forge: 'github' | 'gitlab'; repository: string; number: number } | null {
  let path: string
  try {
    path = new URL(url).pathname
  } catch {
    return null
  }
  const github = /^\/([^/]+\/[^/]+)\/pull\/(\d+)\/?$/.exec(path)
  if (github) return { forge: 'github', repository: github[1] as string, number: Number(github[2]) }
  const gitlab = /^\/(.+?)\/-\/merge_requests\/(\d+)\/?$/.exec(path)
  if (gitlab) return { forge: 'gitlab', repository: gitlab[1] as string, number: Number(gitlab[2]) }
  return null
}

/**
 * Fetches a request's facts through the forge's client (github-pull-facts.ts, gitlab-pull-facts.ts),
 * imported here: `stats` reads outcomes from the index and loads a forge's client (and zod for its
 * replies) only when it refreshes them (docs/development.md#start-up).
 */
export async function pullFacts(
  config: Config,
  pull: { forge: 'github' | 'gitlab'; repository: string; number: number },
  stop?: AbortSignal,
): Promise<ForgePullFacts> {
  if (pull.forge === 'github') {
    const { githubPullFacts } = await import('./github-pull-facts.js')
    return githubPullFacts(config, pull.repository, pull.number, stop)
  }
  const { gitlabPullFacts } = await import('./gitlab-pull-facts.js')
  return gitlabPullFacts(config, pull.repository, pull.number, stop)
}
