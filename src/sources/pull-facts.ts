import type { Config } from '../config/schema.js'
import { githubPullFacts } from './github-pull-facts.js'
import { gitlabPullFacts } from './gitlab-pull-facts.js'
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

/** Fetches a request's facts through the forge's client (github-pull-facts.ts, gitlab-pull-facts.ts). */
export function pullFacts(
  config: Config,
  pull: { forge: 'github' | 'gitlab'; repository: string; number: number },
  stop?: AbortSignal,
): Promise<ForgePullFacts> {
  return pull.forge === 'github' ? githubPullFacts(config, pull.repository, pull.number, stop) : gitlabPullFacts(config, pull.repository, pull.number, stop)
}
