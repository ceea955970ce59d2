import { z } from 'zod'
import type { Config } from '../config/schema.js'
import { CtxError } from '../errors.js'
import { call, client, parseGithubRef, parseGithubRepo } from './github.js'
import { forgeReply } from './forge-reply.js'
import { GITHUB_COMMENTS, LOGIN } from './forge-shapes.js'
import { markerOf } from './marker.js'
import type { Client } from './github.js'
import { AccessCache, githubCanWrite, WRITE_ASSOCIATIONS } from './trust.js'
import type { OwnPull, ReviewEvent, ReviewWatch, TriggerCheck } from './types.js'

/**
 * What the review loop and the trust check read of one GitHub repository (REST: pulls,
 * reviews, review comments, issue comments and events, check runs, commit statuses, the
 * collaborator permission API). `stop` ends every call at once.
 */
export function githubReviewWatch(config: Config, repository: string, stop?: AbortSignal): ReviewWatch & TriggerCheck {
  const { owner, repo } = parseGithubRepo(repository)
  const api = client(config, stop)
  const where = `${owner}/${repo}`
  const bot = config.github.bot_name
  const access = new AccessCache((login) => permission(api, owner, repo, login, stop))
  const anyone = config.sources.trusted === 'any'
  const trusted = async (association: string | undefined, login: string): Promise<boolean> =>
    anyone || WRITE_ASSOCIATIONS.has(association ?? '') || (await access.canWrite(login))
  return {
    async labelTrusted(ref, label) {
      if (anyone) return true
      const { number } = parseGithubRef(ref)
      const listed = await call(ref, () => api.paginate(api.rest.issues.listEvents, { owner, repo, issue_number: number, per_page: 100 }), stop)
      const events = forgeReply('GitHub', `${ref}'s events`, ISSUE_EVENTS, listed)
      // The latest time the label was put on: whoever did that asked for the work.
      const added = events.filter((e) => e.event === 'labeled' && e.label?.name === label).pop()
      const login = added?.actor?.login
      return login !== undefined && (await access.canWrite(login))
    },
    async listOwnPulls() {
      const listed = await call(where, () => api.paginate(api.rest.pulls.list, { owner, repo, state: 'open', per_page: 100 }), stop)
      const pulls = forgeReply('GitHub', `${where}'s open pull requests`, z.array(OPEN_PULL), listed)
      const own: OwnPull[] = []
      for (const p of pulls) {
        const opener = markerOf(p.body ?? '')
        if (opener === null) continue
        own.push({
          ref: `${where}#${p.number}`,
          number: p.number,
          url: p.html_url,
          branch: p.head.ref,
          sha: p.head.sha,
          opener,
          byBot: bot !== null && p.user?.login === bot,
          labels: p.labels.map((l) => l.name ?? ''),
        })
      }
      return own
    },
    async reviewEvents(pull) {
      const at = { owner, repo, pull_number: pull.number, per_page: 100 }
      const events: ReviewEvent[] = []
      const person = (login: string | undefined): login is string => login !== undefined && login !== bot
      const reviews = forgeReply('GitHub', `${pull.ref}'s reviews`, REVIEWS, await call(pull.ref, () => api.paginate(api.rest.pulls.listReviews, at), stop))
      for (const r of reviews) {
        if (r.state !== 'CHANGES_REQUESTED' || !person(r.user?.login) || !(await trusted(r.author_association, r.user.login))) continue
        events.push({ id: `review:${r.id}`, kind: 'changes_requested', author: r.user.login, body: r.body ?? '', at: r.submitted_at ?? '' })
      }
      const listedReviewComments = await call(pull.ref, () => api.paginate(api.rest.pulls.listReviewComments, at), stop)
      for (const c of forgeReply('GitHub', `${pull.ref}'s review comments`, REVIEW_COMMENTS, listedReviewComments)) {
        if (!person(c.user?.login) || !(await trusted(c.author_association, c.user.login))) continue
        const line = c.line ?? c.original_line
        events.push({
          id: `review-comment:${c.id}`,
          kind: 'review_comment',
          author: c.user.login,
          body: c.body,
          at: c.created_at,
          path: `${c.path}${line ? `:${line}` : ''}`,
        })
      }
      const listedComments = await call(
        pull.ref,
        () => api.paginate(api.rest.issues.listComments, { owner, repo, issue_number: pull.number, per_page: 100 }),
        stop,
      )
      for (const c of forgeReply('GitHub', `${pull.ref}'s comments`, GITHUB_COMMENTS, listedComments)) {
        if (!person(c.user?.login) || !(await trusted(c.author_association, c.user.login))) continue
        events.push({ id: `comment:${c.id}`, kind: 'comment', author: c.user.login, body: c.body ?? '', at: c.created_at })
      }
      // Checks of the head commit only: a failure on an earlier commit was the last round's.
      const listedRuns = await call(pull.ref, () => api.paginate(api.rest.checks.listForRef, { owner, repo, ref: pull.sha, per_page: 100 }), stop)
      for (const run of forgeReply('GitHub', `${pull.ref}'s check runs of ${pull.sha}`, CHECK_RUNS, listedRuns)) {
        if (run.conclusion !== 'failure' && run.conclusion !== 'timed_out') continue
        events.push({
          id: `check:${run.id}`,
          kind: 'check',
          author: run.name,
          body: [run.output.title, run.output.summary].filter(Boolean).join('\n'),
          at: run.completed_at ?? '',
        })
      }
      // The newest status of each context (GitHub lists the newest first).
      const listedStatuses = await call(
        pull.ref,
        () => api.paginate(api.rest.repos.listCommitStatusesForRef, { owner, repo, ref: pull.sha, per_page: 100 }),
        stop,
      )
      const contexts = new Set<string>()
      for (const s of forgeReply('GitHub', `${pull.ref}'s commit statuses of ${pull.sha}`, STATUSES, listedStatuses)) {
        if (contexts.has(s.context)) continue
        contexts.add(s.context)
        if (s.state !== 'failure' && s.state !== 'error') continue
        events.push({
          id: `status:${s.id}`,
          kind: 'check',
          author: s.context,
          body: [s.description, s.target_url].filter(Boolean).join('\n'),
          at: s.updated_at,
        })
      }
      return events
    },
    async checkLog(pull, event, maxChars) {
      const match = /^check:(\d+)$/.exec(event.id)
      if (match === null) return null
      const jobId = Number(match[1])
      // A check run of GitHub Actions is its job: the job's log. Any other app's check keeps only its output.
      try {
        const log = await call(pull.ref, () => api.rest.actions.downloadJobLogsForWorkflowRun({ owner, repo, job_id: jobId }), stop)
        if (typeof log === 'string' && log.trim() !== '') return log.slice(-maxChars)
      } catch (err) {
        if (stop?.aborted) throw err
      }
      // A log that cannot be read (nor a check run as documented) leaves the check's name and
      // description: the follow-up still goes.
      const run = await call(pull.ref, () => api.rest.checks.get({ owner, repo, check_run_id: jobId }), stop)
        .then((got) => forgeReply('GitHub', `${pull.ref}'s check run ${jobId}`, CHECK_RUN, got))
        .catch((err: unknown) => {
          if (stop?.aborted) throw err
          return null
        })
      const text = run?.output.text ?? ''
      return text === '' ? null : text.slice(-maxChars)
    },
  }
}

/** What the review loop and delivery read of an open pull request (docs.github.com/rest/pulls/pulls#list-pull-requests). */
const OPEN_PULL = z.object({
  number: z.number(),
  html_url: z.string(),
  body: z.string().nullish(),
  head: z.object({ ref: z.string(), sha: z.string() }),
  user: LOGIN,
  labels: z.array(z.object({ name: z.string().nullish() })),
})

// What reviewEvents, labelTrusted, checkLog and the trust check read of each reply, as
// docs.github.com/rest/issues/events, /rest/pulls/reviews, /rest/pulls/comments,
// /rest/checks/runs, /rest/commits/statuses and /rest/collaborators document it: only
// those fields, so that a reply without one is forgeReply's one line, never a TypeError.
const ISSUE_EVENTS = z.array(z.object({ event: z.string(), label: z.object({ name: z.string() }).nullish(), actor: LOGIN }))
const REVIEWS = z.array(
  z.object({ id: z.number(), state: z.string(), user: LOGIN, author_association: z.string(), body: z.string().nullish(), submitted_at: z.string().nullish() }),
)
const REVIEW_COMMENTS = z.array(
  z.object({
    id: z.number(),
    user: LOGIN,
    author_association: z.string(),
    body: z.string(),
    created_at: z.string(),
    path: z.string(),
    line: z.number().nullish(),
    original_line: z.number().nullish(),
  }),
)
const CHECK_RUNS = z.array(
  z.object({
    id: z.number(),
    name: z.string(),
    conclusion: z.string().nullish(),
    completed_at: z.string().nullish(),
    output: z.object({ title: z.string().nullish(), summary: z.string().nullish() }),
  }),
)
const CHECK_RUN = z.object({ output: z.object({ text: z.string().nullish() }) })
const STATUSES = z.array(
  z.object({
    id: z.number(),
    context: z.string(),
    state: z.string(),
    description: z.string().nullish(),
    target_url: z.string().nullish(),
    updated_at: z.string(),
  }),
)
const PERMISSION = z.object({ permission: z.string().optional(), role_name: z.string().optional() })

/** Write access by the collaborator permission API; not a collaborator (404) is none. */
async function permission(api: Client, owner: string, repo: string, username: string, stop: AbortSignal | undefined): Promise<boolean> {
  try {
    const answer = await call(`${owner}/${repo}`, () => api.rest.repos.getCollaboratorPermissionLevel({ owner, repo, username }), stop)
    return githubCanWrite(forgeReply('GitHub', `${owner}/${repo}'s permission of ${username}`, PERMISSION, answer))
  } catch (err) {
    if (err instanceof CtxError && err.exitCode === 3) return false
    throw err
  }
}
