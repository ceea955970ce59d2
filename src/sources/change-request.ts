import { z } from 'zod'
import type { Config } from '../config/schema.js'
import { forgeReply } from './forge-reply.js'
import { markerOf } from './marker.js'

// The forge clients (Octokit, gitbeaker: ~700 KB of code) are loaded when a change request is
// opened, not by every run that might deliver one (BENCHMARKS.md, start-run).

/** A pull request (GitHub) or merge request (GitLab) delivery asks for (docs/delivery.md#the-pull-request). */
export interface ProposedChange {
  /** The pushed branch. */
  branch: string
  /** The branch to merge into; null: the repository's default branch. */
  base: string | null
  title: string
  body: string
  draft: boolean
  labels: readonly string[]
  /** The hidden marker in the body: how an earlier attempt's PR is found again. */
  marker: string
}

export interface OpenedChange {
  number: number
  url: string
}

/** Where a change request goes: a GitHub repository or a GitLab project. */
export type Forge = { kind: 'github'; owner: string; repo: string } | { kind: 'gitlab'; project: string }

/**
 * Opens the PR/MR, or finds the one an earlier attempt opened (same head branch,
 * the marker in its body): delivery after a crash opens no second one.
 */
export async function openChangeRequest(config: Config, forge: Forge, change: ProposedChange): Promise<OpenedChange> {
  return forge.kind === 'github' ? openPull(config, forge.owner, forge.repo, change) : openMergeRequest(config, forge.project, change)
}

/** The issue's (or PR's / MR's) title, for the title of the change. */
export async function itemTitle(config: Config, forge: Forge, kind: string, number: number): Promise<string> {
  if (forge.kind === 'github') {
    const { call: githubCall, client: githubClient } = await import('./github.js')
    const api = githubClient(config)
    const where = `${forge.owner}/${forge.repo}#${number}`
    const issue = await githubCall(where, () => api.rest.issues.get({ owner: forge.owner, repo: forge.repo, issue_number: number }))
    return forgeReply('GitHub', where, TITLED, issue).title
  }
  const { call: gitlabCall, client: gitlabClient } = await import('./gitlab.js')
  const api = gitlabClient(config)
  const where = `${forge.project}${kind === 'merge_request' ? '!' : '#'}${number}`
  const item = await gitlabCall<unknown>(where, () =>
    kind === 'merge_request' ? api.MergeRequests.show(forge.project, number) : api.Issues.show(number, { projectId: forge.project }),
  )
  return forgeReply('GitLab', where, TITLED, item).title
}

// The fields delivery reads of each reply (docs.github.com/rest/pulls, docs.gitlab.com/api/merge_requests).
const TITLED = z.object({ title: z.string() })
const DEFAULT_BRANCH = z.object({ default_branch: z.string() })
const PULL = z.object({ number: z.number(), html_url: z.string(), body: z.string().nullish(), head: z.object({ ref: z.string() }) })
const MERGE_REQUEST = z.object({ iid: z.number(), web_url: z.string(), description: z.string().nullish(), source_branch: z.string() })

async function openPull(config: Config, owner: string, repo: string, change: ProposedChange): Promise<OpenedChange> {
  const { call: githubCall, client: githubClient } = await import('./github.js')
  const api = githubClient(config)
  const where = `${owner}/${repo}`
  const listed = await githubCall(where, () => api.rest.pulls.list({ owner, repo, head: `${owner}:${change.branch}`, state: 'all', per_page: 100 }))
  const earlier = forgeReply('GitHub', `${where}'s pull requests of ${change.branch}`, z.array(PULL), listed)
  const found = earlier.find((p) => p.head.ref === change.branch && markerOf(p.body) === markerOf(change.marker))
  if (found) return { number: found.number, url: found.html_url }
  const base = change.base ?? forgeReply('GitHub', where, DEFAULT_BRANCH, await githubCall(where, () => api.rest.repos.get({ owner, repo }))).default_branch
  const opened = await githubCall(where, () =>
    api.rest.pulls.create({ owner, repo, head: change.branch, base, title: change.title, body: change.body, draft: change.draft }),
  )
  const made = forgeReply('GitHub', `${where}'s new pull request`, PULL, opened)
  // A pull request takes its labels as an issue does.
  if (change.labels.length > 0)
    await githubCall(`${where}#${made.number}`, () => api.rest.issues.addLabels({ owner, repo, issue_number: made.number, labels: [...change.labels] }))
  return { number: made.number, url: made.html_url }
}

async function openMergeRequest(config: Config, project: string, change: ProposedChange): Promise<OpenedChange> {
  const { call: gitlabCall, client: gitlabClient } = await import('./gitlab.js')
  const api = gitlabClient(config)
  const listed = await gitlabCall<unknown>(project, () => api.MergeRequests.all({ projectId: project, sourceBranch: change.branch, perPage: 100, maxPages: 1 }))
  const earlier = forgeReply('GitLab', `${project}'s merge requests of ${change.branch}`, z.array(MERGE_REQUEST), listed)
  const found = earlier.find((m) => m.source_branch === change.branch && markerOf(m.description) === markerOf(change.marker))
  if (found) return { number: found.iid, url: found.web_url }
  const base = change.base ?? forgeReply('GitLab', project, DEFAULT_BRANCH, await gitlabCall<unknown>(project, () => api.Projects.show(project))).default_branch
  // GitLab marks a draft by the title's prefix.
  const title = change.draft ? `Draft: ${change.title}` : change.title
  const opened = await gitlabCall<unknown>(project, () =>
    api.MergeRequests.create(project, change.branch, base, title, {
      description: change.body,
      ...(change.labels.length > 0 ? { labels: change.labels.join(',') } : {}),
    }),
  )
  const made = forgeReply('GitLab', `${project}'s new merge request`, MERGE_REQUEST, opened)
  return { number: made.iid, url: made.web_url }
}
