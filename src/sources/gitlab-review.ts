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
      const member = (await call<unknown>(project, () => members.show(project, Number(id), { includeInherited: true }), stop)) as {
        access_level?: number
        state?: string
      }
      return (member.access_level ?? 0) >= GITLAB_DEVELOPER && member.state !== 'blocked'
    } catch (err) {
      if (err instanceof CtxError && err.exitCode === 3) return false
      throw err
    }
  })
  type Author = { id: number; username: string }
  return {
    async labelTrusted(ref, label) {
      if (anyone) return true
      const item = parseGitlabRef(ref)
      type LabelEvent = { action: string; label: { name: string } | null; user: Author | null }
      const events = (await call<unknown>(ref, () => (item.kind === 'issue' ? issueLabels : mrLabels).all(project, item.iid), stop)) as LabelEvent[]
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
      type Note = {
        id: number
        body: string
        author: Author
        created_at: string
        system: boolean
        type: string | null
        position?: { new_path?: string; new_line?: number }
      }
      const list = (await call<unknown>(pull.ref, () => notes.all(project, pull.number, { sort: 'asc', orderBy: 'created_at' }), stop)) as Note[]
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
      type Pipeline = { id: number; sha: string; status: string; updated_at?: string; web_url?: string }
      const pipelines = (await call<unknown>(pull.ref, () => mrs.allPipelines(project, pull.number), stop)) as Pipeline[]
      for (const p of pipelines) {
        if (p.sha !== pull.sha || p.status !== 'failed') continue
        events.push({ id: `pipeline:${p.id}`, kind: 'check', author: `pipeline ${p.id}`, body: p.web_url ?? '', at: p.updated_at ?? '' })
      }
      return events
    },
    async checkLog(pull, event, maxChars) {
      const match = /^pipeline:(\d+)$/.exec(event.id)
      if (match === null) return null
      type Job = { id: number; name: string; stage: string }
      const failed = (await call<unknown>(pull.ref, () => jobs.all(project, { pipelineId: Number(match[1]), scope: 'failed' }), stop)) as Job[]
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
