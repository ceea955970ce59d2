import { IssueLabelEvents, Jobs, MergeRequestLabelEvents, MergeRequestNotes, MergeRequests, ProjectMembers } from '@gitbeaker/rest'
import { z } from 'zod'
import type { Config } from '../config/schema.js'
import { CtxError } from '../errors.js'
import { call, parseGitlabProject, parseGitlabRef, stoppable, token } from './gitlab.js'
import { forgeReply } from './forge-reply.js'
import { markerOf } from './marker.js'
import { AccessCache, GITLAB_DEVELOPER } from './trust.js'
import type { OwnPull, ReviewEvent, ReviewWatch, TriggerCheck } from './types.js'

/** What the review loop and delivery read of an open merge request (docs.gitlab.com/api/merge_requests). */
const OPEN_MR = z.object({
  iid: z.number(),
  web_url: z.string(),
  source_branch: z.string(),
  sha: z.string().nullish(),
  description: z.string().nullish(),
  author: z.object({ username: z.string() }),
  labels: z.array(z.string()),
})
const AUTHOR = z.object({ id: z.number(), username: z.string() })
const MEMBER = z.object({ access_level: z.number().optional(), state: z.string().optional() })
const LABEL_EVENTS = z.array(z.object({ action: z.string(), label: z.object({ name: z.string() }).nullish(), user: AUTHOR.nullish() }))
const NOTES = z.array(
  z.object({
    id: z.number(),
    body: z.string(),
    author: AUTHOR,
    created_at: z.string(),
    system: z.boolean(),
    type: z.string().nullish(),
    position: z.object({ new_path: z.string().nullish(), new_line: z.number().nullish() }).nullish(),
  }),
)
const PIPELINES = z.array(z.object({ id: z.number(), sha: z.string(), status: z.string(), updated_at: z.string().nullish(), web_url: z.string().nullish() }))
const JOBS = z.array(z.object({ id: z.number(), name: z.string(), stage: z.string() }))

/**
 * What the review loop and the trust check read of one GitLab project (merge requests,
 * notes, pipelines and their jobs' logs, label events, members with inherited access).
 * `stop` ends every call at once.
 */
export function gitlabReviewWatch(config: Config, projectPath: string, stop?: AbortSignal): ReviewWatch & TriggerCheck {
  const project = parseGitlabProject(projectPath)
  const options = { host: config.gitlab.url, token: token(config) }
  const mrs = stoppable(new MergeRequests(options), stop)
  const notes = stoppable(new MergeRequestNotes(options), stop)
  const jobs = stoppable(new Jobs(options), stop)
  const members = stoppable(new ProjectMembers(options), stop)
  const issueLabels = stoppable(new IssueLabelEvents(options), stop)
  const mrLabels = stoppable(new MergeRequestLabelEvents(options), stop)
  const bot = config.gitlab.bot_name
  const anyone = config.sources.trusted === 'any'
  // Members of the project or of a group above it (GitLab's members/all), Developer or higher.
  const access = new AccessCache(async (id) => {
    try {
      const shown = await call<unknown>(project, () => members.show(project, Number(id), { includeInherited: true }), stop)
      const member = forgeReply('GitLab', `${project}'s member ${id}`, MEMBER, shown)
      return (member.access_level ?? 0) >= GITLAB_DEVELOPER && member.state !== 'blocked'
    } catch (err) {
      if (err instanceof CtxError && err.exitCode === 3) return false
      throw err
    }
  })
  return {
    async labelTrusted(ref, label) {
      if (anyone) return true
      const item = parseGitlabRef(ref)
      const listed = await call<unknown>(ref, () => (item.kind === 'issue' ? issueLabels : mrLabels).all(project, item.iid), stop)
      const events = forgeReply('GitLab', `${ref}'s label events`, LABEL_EVENTS, listed)
      const added = events.filter((e) => e.action === 'add' && e.label?.name === label).pop()
      return added?.user != null && (await access.canWrite(String(added.user.id)))
    },
    async listOwnPulls() {
      const listed = await call<unknown>(project, () => mrs.all({ projectId: project, state: 'opened', perPage: 100 }), stop)
      const open = forgeReply('GitLab', `${project}'s open merge requests`, z.array(OPEN_MR), listed)
      const own: OwnPull[] = []
      for (const m of open) {
        const opener = markerOf(m.description ?? '')
        if (opener === null) continue
        own.push({
          ref: `${project}!${m.iid}`,
          number: m.iid,
          url: m.web_url,
          branch: m.source_branch,
          sha: m.sha ?? '',
          opener,
          byBot: bot !== null && m.author.username === bot,
          labels: m.labels,
        })
      }
      return own
    },
    async reviewEvents(pull) {
      const listed = await call<unknown>(pull.ref, () => notes.all(project, pull.number, { sort: 'asc', orderBy: 'created_at' }), stop)
      const list = forgeReply('GitLab', `${pull.ref}'s notes`, NOTES, listed)
      const events: ReviewEvent[] = []
      for (const n of list) {
        if (n.system || n.author.username === bot) continue
        if (!anyone && !(await access.canWrite(String(n.author.id)))) continue
        const path = n.position?.new_path ? `${n.position.new_path}${n.position.new_line ? `:${n.position.new_line}` : ''}` : undefined
        events.push({
          id: `note:${n.id}`,
          kind: n.type === 'DiffNote' ? 'review_comment' : 'comment',
          author: n.author.username,
          body: n.body,
          at: n.created_at,
          ...(path ? { path } : {}),
        })
      }
      // Pipelines of the head commit only: a failure on an earlier commit was the last round's.
      const pipelines = forgeReply(
        'GitLab',
        `${pull.ref}'s pipelines`,
        PIPELINES,
        await call<unknown>(pull.ref, () => mrs.allPipelines(project, pull.number), stop),
      )
      for (const p of pipelines) {
        if (p.sha !== pull.sha || p.status !== 'failed') continue
        events.push({ id: `pipeline:${p.id}`, kind: 'check', author: `pipeline ${p.id}`, body: p.web_url ?? '', at: p.updated_at ?? '' })
      }
      return events
    },
    async checkLog(pull, event, maxChars) {
      const match = /^pipeline:(\d+)$/.exec(event.id)
      if (match === null) return null
      const listed = await call<unknown>(pull.ref, () => jobs.all(project, { pipelineId: Number(match[1]), scope: 'failed' }), stop)
      const failed = forgeReply('GitLab', `${pull.ref}'s failed jobs of pipeline ${match[1]}`, JOBS, listed)
      const parts: string[] = []
      // Each failed job's name and the tail of its log, within the one bound.
      const each = Math.max(200, Math.floor(maxChars / Math.max(1, failed.length)))
      for (const job of failed.slice(0, 5)) {
        const log = (await call<unknown>(pull.ref, () => jobs.showLog(project, job.id), stop).catch((err: unknown) => {
          if (stop?.aborted) throw err
          return ''
        })) as string
        parts.push(`job ${job.name} (${job.stage}):\n${String(log).slice(-each)}`)
      }
      return parts.length === 0 ? null : parts.join('\n\n').slice(-maxChars)
    },
  }
}
