import { MergeRequests, Projects } from '@gitbeaker/rest'
import { z } from 'zod'
import type { Config } from '../config/schema.js'
import { call, parseGitlabProject, token } from './gitlab.js'
import { forgeReply } from './forge-reply.js'
import type { MergedChange, MergedChanges } from './merged-change.js'

const PROJECT = z.object({ http_url_to_repo: z.string() })
const LISTED = z.array(z.object({ iid: z.number(), merged_at: z.string().nullish() }))
const MR = z.object({
  iid: z.number(),
  title: z.string(),
  description: z.string().nullish(),
  web_url: z.string(),
  merged_at: z.string().nullish(),
  sha: z.string(),
  diff_refs: z.object({ base_sha: z.string(), head_sha: z.string(), start_sha: z.string() }),
})
const DIFFS = z.array(z.object({ old_path: z.string(), new_path: z.string(), renamed_file: z.boolean(), deleted_file: z.boolean() }))
const ISSUES = z.array(z.object({ iid: z.number(), title: z.string(), description: z.string().nullish() }))

/**
 * The project's merged merge requests, newest first, merged at or after `since`, at most
 * `limit` (API v4: the project, merge_requests?state=merged by update, each one with its
 * diff_refs, its diffs, and the issues it closes: GitLab's closes_issues).
 */
export async function gitlabMergedChanges(config: Config, projectPath: string, since: Date | null, limit: number): Promise<MergedChanges> {
  const project = parseGitlabProject(projectPath)
  const options = { host: config.gitlab.url, token: token(config) }
  const mrs = new MergeRequests(options)
  const { http_url_to_repo } = forgeReply('GitLab', project, PROJECT, await call<unknown>(project, () => new Projects(options).show(project)))
  const listed = forgeReply(
    'GitLab',
    `${project}'s merge requests`,
    LISTED,
    await call<unknown>(project, () =>
      mrs.all({
        projectId: project,
        state: 'merged',
        orderBy: 'updated_at',
        sort: 'desc',
        perPage: 100,
        maxPages: Math.ceil(limit / 100) + 1,
        ...(since === null ? {} : { updatedAfter: since.toISOString() }),
      }),
    ),
  )
  const wanted = listed.filter((m) => m.merged_at != null && (since === null || new Date(m.merged_at) >= since)).slice(0, limit)
  const changes: MergedChange[] = []
  for (const { iid } of wanted) {
    const ref = `${project}!${iid}`
    const mr = forgeReply('GitLab', `merge request ${ref}`, MR, await call<unknown>(ref, () => mrs.show(project, iid)))
    const diffs = forgeReply('GitLab', `${ref}'s diffs`, DIFFS, await call<unknown>(ref, () => mrs.allDiffs(project, iid, { perPage: 100 })))
    const closed = forgeReply('GitLab', `the issues ${ref} closes`, ISSUES, await call<unknown>(ref, () => mrs.allIssuesClosed(project, iid)))
    changes.push({
      number: iid,
      ref,
      title: mr.title,
      body: mr.description ?? '',
      url: mr.web_url,
      merged_at: mr.merged_at ?? '',
      // GitLab's diff_refs.base_sha is the merge base the merge request's diff is made from.
      base_sha: mr.diff_refs.base_sha,
      base_tip: mr.diff_refs.start_sha,
      head_sha: mr.diff_refs.head_sha,
      head_ref: `refs/merge-requests/${iid}/head`,
      files: diffs.map((d) => ({ path: d.new_path, previous: d.renamed_file ? d.old_path : null, removed: d.deleted_file })),
      closes: closed.map((i) => ({ ref: `${project}#${i.iid}`, title: i.title, body: i.description ?? '' })),
    })
  }
  return { clone_url: http_url_to_repo, changes }
}
