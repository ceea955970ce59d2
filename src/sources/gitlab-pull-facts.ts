import { MergeRequestNotes, MergeRequests } from '@gitbeaker/rest'
import { z } from 'zod'
import type { Config } from '../config/schema.js'
import { call, parseGitlabProject, stoppable, token } from './gitlab.js'
import { forgeReply } from './forge-reply.js'
import { earliest } from './forge-pull.js'
import type { ForgePullFacts } from './forge-pull.js'

const USER = z.object({ username: z.string() }).nullish()
const MR = z.object({
  state: z.string(),
  created_at: z.string(),
  merged_at: z.string().nullish(),
  closed_at: z.string().nullish(),
  merged_by: USER,
  merge_user: USER,
  closed_by: USER,
})
const COMMITS = z.array(z.object({ id: z.string() }))
const NOTES = z.array(z.object({ author: USER, created_at: z.string(), system: z.boolean() }))

/** A GitLab merge request's facts (API v4: the merge request, its commits, its notes). */
export async function gitlabPullFacts(config: Config, projectPath: string, iid: number, stop?: AbortSignal): Promise<ForgePullFacts> {
  const project = parseGitlabProject(projectPath)
  const options = { host: config.gitlab.url, token: token(config) }
  const mrs = stoppable(new MergeRequests(options), stop)
  const notes = stoppable(new MergeRequestNotes(options), stop)
  const where = `${project}!${iid}`
  const mr = forgeReply('GitLab', `merge request ${where}`, MR, await call<unknown>(where, () => mrs.show(project, iid), stop))
  const commits = forgeReply('GitLab', `${where}'s commits`, COMMITS, await call<unknown>(where, () => mrs.allCommits(project, iid), stop))
  const said = forgeReply('GitLab', `${where}'s notes`, NOTES, await call<unknown>(where, () => notes.all(project, iid), stop))
  const bot = config.gitlab.bot_name
  const merged = mr.state === 'merged'
  const closed = mr.state === 'closed'
  return {
    state: merged ? 'merged' : closed ? 'closed' : 'open',
    created_at: mr.created_at,
    merged_at: merged ? (mr.merged_at ?? null) : null,
    merged_by: merged ? ((mr.merge_user ?? mr.merged_by)?.username ?? null) : null,
    closed_at: closed ? (mr.closed_at ?? null) : null,
    closed_by: closed ? (mr.closed_by?.username ?? null) : null,
    first_response_at: earliest(said.filter((n) => !n.system && n.author != null && n.author.username !== bot).map((n) => n.created_at)),
    // GitLab lists a merge request's commits newest first.
    commits: commits.map((c) => c.id).reverse(),
  }
}
