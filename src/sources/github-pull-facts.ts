import { z } from 'zod'
import type { Config } from '../config/schema.js'
import { call, client, parseGithubRepo } from './github.js'
import { forgeReply } from './forge-reply.js'
import { earliest } from './forge-pull.js'
import type { ForgePullFacts } from './forge-pull.js'

const LOGIN = z.object({ login: z.string(), type: z.string().optional() }).nullish()
const PULL = z.object({
  state: z.string(),
  created_at: z.string(),
  merged_at: z.string().nullish(),
  closed_at: z.string().nullish(),
  merged_by: LOGIN,
})
const ISSUE = z.object({ closed_by: LOGIN })
const COMMITS = z.array(z.object({ sha: z.string() }))
const REVIEWS = z.array(z.object({ user: LOGIN, submitted_at: z.string().nullish() }))
const COMMENTS = z.array(z.object({ user: LOGIN, created_at: z.string() }))

/**
 * A GitHub pull request's facts (REST: GET pulls/N, pulls/N/commits, pulls/N/reviews, the
 * issue's comments, and the issue for who closed it).
 */
export async function githubPullFacts(config: Config, repository: string, number: number, stop?: AbortSignal): Promise<ForgePullFacts> {
  const { owner, repo } = parseGithubRepo(repository)
  const api = client(config, stop)
  const where = `${owner}/${repo}#${number}`
  const at = { owner, repo, pull_number: number, per_page: 100 }
  const pull = forgeReply('GitHub', `pull request ${where}`, PULL, await call(where, () => api.rest.pulls.get({ owner, repo, pull_number: number }), stop))
  const commits = forgeReply('GitHub', `${where}'s commits`, COMMITS, await call(where, () => api.paginate(api.rest.pulls.listCommits, at), stop))
  const reviews = forgeReply('GitHub', `${where}'s reviews`, REVIEWS, await call(where, () => api.paginate(api.rest.pulls.listReviews, at), stop))
  const comments = forgeReply(
    'GitHub',
    `${where}'s comments`,
    COMMENTS,
    await call(where, () => api.paginate(api.rest.issues.listComments, { owner, repo, issue_number: number, per_page: 100 }), stop),
  )
  const bot = config.github.bot_name
  const person = (u: z.infer<typeof LOGIN>): boolean => u != null && u.login !== bot && u.type !== 'Bot'
  const merged = pull.merged_at != null
  const closed = !merged && pull.state === 'closed'
  const closer = closed
    ? forgeReply('GitHub', `issue ${where}`, ISSUE, await call(where, () => api.rest.issues.get({ owner, repo, issue_number: number }), stop)).closed_by
    : null
  return {
    state: merged ? 'merged' : closed ? 'closed' : 'open',
    created_at: pull.created_at,
    merged_at: pull.merged_at ?? null,
    merged_by: pull.merged_by?.login ?? null,
    closed_at: closed ? (pull.closed_at ?? null) : null,
    closed_by: closer?.login ?? null,
    first_response_at: earliest([
      ...reviews.filter((r) => person(r.user)).map((r) => r.submitted_at),
      ...comments.filter((c) => person(c.user)).map((c) => c.created_at),
    ]),
    commits: commits.map((c) => c.sha),
  }
}
