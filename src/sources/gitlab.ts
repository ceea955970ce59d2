import { Gitlab, Issues, MergeRequests } from '@gitbeaker/rest'
import { z } from 'zod'
import type { Config } from '../config/schema.js'
import { CtxError, UsageError } from '../errors.js'
import { forgeReply } from './forge-reply.js'
import { GITLAB_DISCUSSIONS, GITLAB_ITEM, GITLAB_NOTES, GITLAB_TRACKED, MADE } from './forge-shapes.js'
import type { GitlabNote } from './forge-shapes.js'
import { isOwn, markerOf } from './marker.js'
import { oneLine, quoted } from './quote.js'
import { raceAbort, withStop } from './abort.js'
import type { Channel, CurrentItem, LabelledItem, RemoteComment, RemoteTask, Tracker } from './types.js'

type Api = InstanceType<typeof Gitlab<false>>

export interface GitlabRef {
  /** group/sub/project */
  project: string
  kind: 'issue' | 'merge_request'
  iid: number
}

/** `group/sub/project#N` (issue) or `group/sub/project!N` (merge request). */
export function parseGitlabRef(text: string): GitlabRef {
  const match = /^([A-Za-z0-9_.-]+(?:\/[A-Za-z0-9_.-]+)+)([#!])(\d+)$/.exec(text.trim())
  if (!match)
    throw new UsageError(
      `--gitlab ${text.slice(0, 80)} is not group/project#N or group/project!N`,
      'e.g. --gitlab acme/backend/api#7, or acme/backend/api!12 for a merge request',
    )
  const iid = Number(match[3])
  if (!(Number.isInteger(iid) && iid >= 1 && iid <= MAX_IID)) {
    throw new UsageError(
      `--gitlab ${text.slice(0, 80)}: the issue or merge request number must be a whole number from 1 to ${MAX_IID}`,
      'e.g. --gitlab acme/backend/api#7, or acme/backend/api!12 for a merge request',
    )
  }
  return { project: match[1] as string, kind: match[2] === '!' ? 'merge_request' : 'issue', iid }
}

/** `group/sub/project`, for the poller. */
export function parseGitlabProject(text: string): string {
  const match = /^[A-Za-z0-9_.-]+(?:\/[A-Za-z0-9_.-]+)+$/.exec(text.trim())
  if (!match) throw new UsageError(`--gitlab ${text.slice(0, 80)} is not group/project`, 'e.g. --gitlab acme/backend/api')
  return match[0]
}

/** The largest issue or merge request iid GitLab stores (a signed 32-bit integer). */
const MAX_IID = 2_147_483_647

/**
 * gitbeaker retries 429 and 502 answers itself, up to 10 times, 0.25·2^n ms apart: it does
 * not read Retry-After.
 */
export function client(config: Config): Api {
  return new Gitlab({ host: config.gitlab.url, token: token(config) })
}

export function token(config: Config): string {
  const value = config.gitlab.token
  if (value === null) throw new UsageError('no GitLab token is set', 'set GITLAB_TOKEN or gitlab.token (scope: api)')
  return value
}

type Requester = Issues['requester']

/**
 * gitbeaker takes no AbortSignal (jdalrymple/gitbeaker#3561; a `signal` option would be
 * sent as query parameters): the resource's requester is wrapped so that each request it
 * makes (pages and retries included) also ends when `stop` aborts.
 */
export function stoppable<R extends { requester: Requester }>(resource: R, stop: AbortSignal | undefined): R {
  if (stop === undefined) return resource
  const inner = resource.requester
  const wrap = <M extends keyof Requester>(method: M): Requester[M] =>
    ((endpoint: string, options?: Parameters<Requester[M]>[1]) =>
      withStop(stop, options?.signal, (signal) => inner[method](endpoint, { ...options, signal }))) as Requester[M]
  Object.assign(resource, { requester: { get: wrap('get'), post: wrap('post'), put: wrap('put'), patch: wrap('patch'), delete: wrap('delete') } })
  return resource
}

/** Reads a GitLab issue or merge request into a task. */
export async function loadGitlabTask(config: Config, ref: GitlabRef): Promise<RemoteTask> {
  const api = client(config)
  const where = name(ref)
  const item = forgeReply(
    'GitLab',
    where,
    GITLAB_ITEM,
    await call<unknown>(where, () =>
      ref.kind === 'issue' ? api.Issues.show(ref.iid, { projectId: ref.project }) : api.MergeRequests.show(ref.project, ref.iid),
    ),
  )
  const notes = await listNotes(api, ref)
  // Every word from the forge is quoted or flattened to one line: none can pass for our own headers.
  const parts = [
    `# ${ref.kind === 'issue' ? 'Issue' : 'Merge request'} ${where}: ${oneLine(item.title)}`,
    `Opened by @${oneLine(item.author.username)}${item.labels.length ? `; labels: ${item.labels.map((l) => oneLine(l, 60)).join(', ')}` : ''}`,
    ...(ref.kind === 'merge_request' ? [`Branch ${oneLine(item.source_branch ?? '')} into ${oneLine(item.target_branch ?? '')}`] : []),
    '',
    item.description?.trim() ? quoted(item.description.trim()) : '(no description)',
  ]
  if (ref.kind === 'merge_request') {
    const threads = await unresolvedThreads(api, ref)
    if (threads.length > 0) parts.push('', '## Unresolved threads', ...threads)
  }
  const visible = notes.filter((n) => !n.system && !isOwn(n.body, n.author.username, config.gitlab.bot_name))
  if (visible.length > 0)
    parts.push('', '## Comments', ...visible.map((n) => `### @${oneLine(n.author.username)} (${oneLine(n.created_at)})\n${quoted(n.body)}`))
  const [group = '', ...rest] = ref.project.split('/')
  return {
    key: { task_source: 'gitlab', owner: group, repo: rest.join('/'), task_type: ref.kind, task_id: String(ref.iid) },
    text: parts.join('\n'),
    seen: notes.map((n) => String(n.id)),
    channel: gitlabChannel(api, ref, config.gitlab.bot_name),
    ...(ref.kind === 'merge_request' && item.source_branch
      ? {
          pull: {
            head: { branch: item.source_branch, number: ref.iid, url: item.web_url ?? '' },
            opener: markerOf(item.description ?? ''),
            byBot: config.gitlab.bot_name !== null && item.author.username === config.gitlab.bot_name,
          },
        }
      : {}),
  }
}

/** The channel of a resumed task that came from GitLab. */
export function gitlabChannelFor(config: Config, ref: GitlabRef): Channel {
  return gitlabChannel(client(config), ref, config.gitlab.bot_name)
}

/** `signal` ends the wait for it (gitbeaker takes none: it would become query parameters). */
async function listNotes(api: Api, ref: GitlabRef, signal?: AbortSignal): Promise<GitlabNote[]> {
  const options = { sort: 'asc' as const, orderBy: 'created_at' as const }
  const notes = await call<unknown>(
    name(ref),
    () => (ref.kind === 'issue' ? api.IssueNotes.all(ref.project, ref.iid, options) : api.MergeRequestNotes.all(ref.project, ref.iid, options)),
    signal,
  )
  return forgeReply('GitLab', `${name(ref)}'s notes`, GITLAB_NOTES, notes)
}

async function unresolvedThreads(api: Api, ref: GitlabRef): Promise<string[]> {
  const listed = await call<unknown>(name(ref), () => api.MergeRequestDiscussions.all(ref.project, ref.iid))
  const discussions = forgeReply('GitLab', `${name(ref)}'s discussions`, GITLAB_DISCUSSIONS, listed)
  return discussions
    .filter((d) => d.notes.some((n) => n.resolvable === true && n.resolved !== true))
    .map((d) => {
      const position = d.notes[0]?.position
      const at = position?.new_path ? `${position.new_path}${position.new_line ? `:${position.new_line}` : ''}` : 'thread'
      return `### ${oneLine(at)}\n${d.notes
        .filter((n) => !n.system)
        .map((n) => `@${oneLine(n.author.username)}:\n${quoted(n.body)}`)
        .join('\n')}`
    })
}

function gitlabChannel(api: Api, ref: GitlabRef, botName: string | null): Channel {
  const where = name(ref)
  const notes = ref.kind === 'issue' ? api.IssueNotes : api.MergeRequestNotes
  return {
    name: where,
    botName,
    async listComments(_since, signal) {
      // GitLab has no `since` for notes; ids at or below the caller's high-water mark are dropped there.
      const all = await listNotes(api, ref, signal)
      return all.filter((n) => !n.system).map((n): RemoteComment => ({ id: String(n.id), author: n.author.username, body: n.body, created_at: n.created_at }))
    },
    // gitbeaker's create takes no signal: the caller's race (RemoteLink) bounds it.
    async post(body) {
      const made = await call<unknown>(where, () => notes.create(ref.project, ref.iid, body))
      return String(forgeReply('GitLab', `${where}'s new note`, MADE, made).id)
    },
    async edit(id, body, signal) {
      await call<unknown>(where, () => notes.edit(ref.project, ref.iid, Number(id), { body }), signal)
    },
  }
}

/**
 * A project's open issues and merge requests by label, and their labels changed: for the
 * poller (docs/contract.md §14.2). `stop` ends every call at once.
 */
export function gitlabTracker(config: Config, projectPath: string, stop?: AbortSignal): Tracker {
  const project = parseGitlabProject(projectPath)
  const options = { host: config.gitlab.url, token: token(config) }
  const issues = stoppable(new Issues(options), stop)
  const mergeRequests = stoppable(new MergeRequests(options), stop)
  return {
    name: `gitlab:${project}`,
    async listOpen(label) {
      const listing = (what: string, listed: unknown) => forgeReply('GitLab', `${project}'s open ${what} labelled ${label}`, z.array(GITLAB_TRACKED), listed)
      const open = listing('issues', await call<unknown>(project, () => issues.all({ projectId: project, labels: label, state: 'opened', perPage: 100 }), stop))
      const mrs = listing(
        'merge requests',
        await call<unknown>(project, () => mergeRequests.all({ projectId: project, labels: label, state: 'opened', perPage: 100 }), stop),
      )
      return [
        ...open.map((i): LabelledItem => ({ ref: `${project}#${i.iid}`, labels: i.labels })),
        ...mrs.map((m): LabelledItem => ({ ref: `${project}!${m.iid}`, labels: m.labels })),
      ]
    },
    async current(ref) {
      const item = parseGitlabRef(ref)
      try {
        const now = forgeReply(
          'GitLab',
          ref,
          GITLAB_TRACKED,
          await call<unknown>(ref, () => (item.kind === 'issue' ? issues.show(item.iid, { projectId: project }) : mergeRequests.show(project, item.iid)), stop),
        )
        return { ref, open: now.state === 'opened', labels: now.labels } satisfies CurrentItem
      } catch (err) {
        // Deleted, or moved to another project: gone from this one.
        if (err instanceof CtxError && err.exitCode === 3) return null
        throw err
      }
    },
    async relabel(ref, add, remove) {
      const item = parseGitlabRef(ref)
      // One edit does both; GitLab ignores a label to remove that the item does not carry.
      const change = { ...(add !== null ? { addLabels: add } : {}), ...(remove.length > 0 ? { removeLabels: remove.join(',') } : {}) }
      await call<unknown>(ref, () => (item.kind === 'issue' ? issues.edit(project, item.iid, change) : mergeRequests.edit(project, item.iid, change)), stop)
    },
  }
}

function name(ref: GitlabRef): string {
  return `${ref.project}${ref.kind === 'issue' ? '#' : '!'}${ref.iid}`
}

/** One API call: the data, or one line saying what failed and what to check; `stop` aborting rejects it at once with its reason. */
export async function call<T>(where: string, fn: () => Promise<T> | Promise<unknown>, stop?: AbortSignal): Promise<T> {
  try {
    return (await raceAbort(fn as () => Promise<unknown>, stop)) as T
  } catch (err) {
    if (stop?.aborted) throw err
    const status = (err as { cause?: { response?: { status?: number } } }).cause?.response?.status
    if (status === 401) throw new CtxError(`GitLab refused the token for ${where} (401)`, { hint: 'check GITLAB_TOKEN or gitlab.token' })
    if (status === 403) throw new CtxError(`GitLab denied access to ${where} (403)`, { hint: 'the token needs the api scope and access to the project' })
    if (status === 404)
      throw new CtxError(`GitLab has no ${where} (404)`, { exitCode: 3, hint: 'check the project path and number, and that the token can see the project' })
    throw new CtxError(`GitLab request for ${where} failed${status ? ` (${status})` : ''}: ${((err as Error).message.split('\n')[0] ?? '').slice(0, 200)}`, {
      hint: 'check gitlab.url and the network',
    })
  }
}
