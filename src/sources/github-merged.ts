import { z } from 'zod'
import type { Config } from '../config/schema.js'
import { call, client, parseGithubRepo } from './github.js'
import { forgeReply } from './forge-reply.js'
import { closingNumbers } from './merged-change.js'
import type { MergedChange, MergedChanges } from './merged-change.js'

const REPO = z.object({ clone_url: z.string() })
const PULL = z.object({
  number: z.number(),
  title: z.string(),
  body: z.string().nullish(),
  html_url: z.string(),
  merged_at: z.string().nullish(),
  base: z.object({ sha: z.string() }),
  head: z.object({ sha: z.string() }),
})
const FILES = z.array(z.object({ filename: z.string(), status: z.string(), previous_filename: z.string().nullish() }))
const ISSUE = z.object({ number: z.number(), title: z.string(), body: z.string().nullish(), pull_request: z.unknown().optional() })

/**
 * The repository's merged pull requests, newest first, merged at or after `since`, at most
 * `limit` (REST: GET repos/{owner}/{repo}, pulls?state=closed sorted by update, each
 * one's files, and the issues its body closes). GitHub's REST API gives no closing
 * references of its own (only GraphQL has them): the body's closing keywords are read.
 */
export async function githubMergedChanges(config: Config, repository: string, since: Date | null, limit: number): Promise<MergedChanges> {
  const { owner, repo } = parseGithubRepo(repository)
  const api = client(config)
  const where = `${owner}/${repo}`
  const { clone_url } = forgeReply('GitHub', where, REPO, await call(where, () => api.rest.repos.get({ owner, repo })))
  const pulls: z.infer<typeof PULL>[] = []
  // Sorted by last update, newest first: a pull merged after `since` was updated after it, so the walk can stop there.
  for await (const page of api.paginate.iterator(api.rest.pulls.list, { owner, repo, state: 'closed', sort: 'updated', direction: 'desc', per_page: 100 })) {
    const listed = forgeReply('GitHub', `${where}'s pull requests`, z.array(PULL.extend({ updated_at: z.string() })), page.data)
    for (const pull of listed) {
      if (pull.merged_at != null && (since === null || new Date(pull.merged_at) >= since)) pulls.push(pull)
    }
    const last = listed.at(-1)
    if (pulls.length >= limit || last === undefined || (since !== null && new Date(last.updated_at) < since)) break
  }
  const changes: MergedChange[] = []
  for (const pull of pulls.slice(0, limit)) {
    const ref = `${where}#${pull.number}`
    const files = forgeReply(
      'GitHub',
      `${ref}'s files`,
      FILES,
      await call(ref, () => api.paginate(api.rest.pulls.listFiles, { owner, repo, pull_number: pull.number, per_page: 100 })),
    )
    const closes: MergedChange['closes'] = []
    for (const n of closingNumbers(pull.body ?? '')) {
      const issueRef = `${where}#${n}`
      const issue = await call(issueRef, () => api.rest.issues.get({ owner, repo, issue_number: n })).catch(() => null)
      const parsed = issue === null ? null : ISSUE.safeParse(issue)
      // A number that is no issue here (a pull request, a typo): no statement from it.
      if (parsed?.success && parsed.data.pull_request == null) closes.push({ ref: issueRef, title: parsed.data.title, body: parsed.data.body ?? '' })
    }
    changes.push({
      number: pull.number,
      ref,
      title: pull.title,
      body: pull.body ?? '',
      url: pull.html_url,
      merged_at: pull.merged_at as string,
      base_sha: null,
      base_tip: pull.base.sha,
      head_sha: pull.head.sha,
      head_ref: `refs/pull/${pull.number}/head`,
      files: files.map((f) => ({ path: f.filename, previous: f.previous_filename ?? null, removed: f.status === 'removed' })),
      closes,
    })
  }
  return { clone_url, changes }
}
