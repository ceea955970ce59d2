import { retry } from '@octokit/plugin-retry'
import { throttling } from '@octokit/plugin-throttling'
import { Octokit } from '@octokit/rest'
import type { Config } from '../config/schema.js'
import { CtxError, UsageError } from '../errors.js'
import { forgeReply } from './forge-reply.js'
import { GITHUB_COMMENTS, GITHUB_ISSUE, GITHUB_LISTED, GITHUB_PULL, GITHUB_THREADS, MADE } from './forge-shapes.js'
import { isOwn, markerOf } from './marker.js'
import { WRITE_ASSOCIATIONS } from './trust.js'
import { oneLine, quoted } from './quote.js'
import { abortableFetch, raceAbort } from './abort.js'
import type { Channel, CurrentItem, LabelledItem, PullSource, RemoteComment, RemoteTask, Tracker } from './types.js'

const RetryingOctokit = Octokit.plugin(retry, throttling)
export type Client = InstanceType<typeof RetryingOctokit>

export interface GithubRef {
  owner: string
  repo: string
  number: number
}

/** `owner/repo#N`, checked before anything is fetched. */
export function parseGithubRef(text: string): GithubRef {
  const match = /^([A-Za-z0-9_.-]+)\/([A-Za-z0-9_.-]+)#(\d+)$/.exec(text.trim())
  if (!match) throw new UsageError(`--github ${text.slice(0, 80)} is not owner/repo#N`, 'e.g. --github acme/shop#42')
  const number = Number(match[3])
  if (!isItemNumber(number))
    throw new UsageError(
      `--github ${text.slice(0, 80)}: the issue or pull request number must be a whole number from 1 to ${MAX_ITEM_NUMBER}`,
      'e.g. --github acme/shop#42',
    )
  return { owner: match[1] as string, repo: match[2] as string, number }
}

/** `owner/repo`, for the poller. */
export function parseGithubRepo(text: string): { owner: string; repo: string } {
  const match = /^([A-Za-z0-9_.-]+)\/([A-Za-z0-9_.-]+)$/.exec(text.trim())
  if (!match) throw new UsageError(`--github ${text.slice(0, 80)} is not owner/repo`, 'e.g. --github acme/shop')
  return { owner: match[1] as string, repo: match[2] as string }
}

/** The largest issue or pull request number GitHub stores (a signed 32-bit integer). */
const MAX_ITEM_NUMBER = 2_147_483_647

function isItemNumber(n: number): boolean {
  return Number.isInteger(n) && n >= 1 && n <= MAX_ITEM_NUMBER
}

/** The longest rate-limit wait that is waited out; a longer one fails the call (a warning while a task runs). */
const MAX_RATE_LIMIT_WAIT_SECONDS = 5

/**
 * The client, as GitHub recommends using it: retries of failed requests
 * (@octokit/plugin-retry) and rate limits waited out (@octokit/plugin-throttling:
 * the reset time of a primary limit, Retry-After of a secondary one), twice at most,
 * and only when the wait is short: a reset an hour away must not hold a turn (nor a
 * stop, a pause or --timeout) for an hour. With `stop`, every request it makes ends
 * when `stop` aborts (paginate() would drop a per-call signal).
 */
export function client(config: Config, stop?: AbortSignal): Client {
  const token = config.github.token
  if (token === null) throw new UsageError('no GitHub token is set', 'set GITHUB_TOKEN or github.token (scopes: repo, or issues and pull requests read/write)')
  return new RetryingOctokit({
    auth: token,
    baseUrl: config.github.api_url,
    userAgent: 'ctxagent',
    throttle: {
      onRateLimit: (after: number, _options: unknown, _octokit: unknown, retryCount: number) => retryCount < 2 && after <= MAX_RATE_LIMIT_WAIT_SECONDS,
      onSecondaryRateLimit: (after: number, _options: unknown, _octokit: unknown, retryCount: number) => retryCount < 2 && after <= MAX_RATE_LIMIT_WAIT_SECONDS,
    },
    retry: { retries: 2 },
    ...(stop ? { request: { fetch: abortableFetch(stop) } } : {}),
    log: { debug: () => undefined, info: () => undefined, warn: () => undefined, error: () => undefined },
  })
}

/** Reads a GitHub issue or pull request (which one, GitHub says) into a task. */
export async function loadGithubTask(config: Config, ref: GithubRef): Promise<RemoteTask> {
  const api = client(config)
  const where = `${ref.owner}/${ref.repo}#${ref.number}`
  const issue = forgeReply(
    'GitHub',
    where,
    GITHUB_ISSUE,
    await call(where, () => api.rest.issues.get({ owner: ref.owner, repo: ref.repo, issue_number: ref.number })),
  )
  const isPr = issue.pull_request != null
  const comments = forgeReply(
    'GitHub',
    `${where}'s comments`,
    GITHUB_COMMENTS,
    await call(where, () => api.paginate(api.rest.issues.listComments, { owner: ref.owner, repo: ref.repo, issue_number: ref.number, per_page: 100 })),
  )
  // Every word from the forge is quoted or flattened to one line: none can pass for our own headers.
  const parts = [
    `# ${isPr ? 'Pull request' : 'Issue'} ${where}: ${oneLine(issue.title)}`,
    `Opened by @${oneLine(issue.user?.login ?? 'unknown')}${labels(issue.labels)}`,
    '',
    issue.body?.trim() ? quoted(issue.body.trim()) : '(no description)',
  ]
  let pull: PullSource | undefined
  if (isPr) {
    const pr = forgeReply(
      'GitHub',
      `pull request ${where}`,
      GITHUB_PULL,
      await call(where, () => api.rest.pulls.get({ owner: ref.owner, repo: ref.repo, pull_number: ref.number })),
    )
    parts.splice(2, 0, `Branch ${oneLine(pr.head.ref)} into ${oneLine(pr.base.ref)}`)
    const bot = config.github.bot_name
    pull = {
      head: { branch: pr.head.ref, number: ref.number, url: pr.html_url },
      opener: markerOf(pr.body ?? ''),
      byBot: bot !== null && pr.user?.login === bot,
    }
    const threads = await unresolvedThreads(api, ref)
    if (threads.length > 0) parts.push('', '## Unresolved review threads', ...threads)
  }
  const visible = comments.filter((c) => !isOwn(c.body ?? '', c.user?.login, config.github.bot_name))
  // Who has no write access is said (docs/delivery.md#trust): their words are data like everyone's, and no request of the repository's.
  const stranger = (association: string) =>
    config.sources.trusted === 'write' && !WRITE_ASSOCIATIONS.has(association) ? '; no write access to the repository' : ''
  if (visible.length > 0)
    parts.push(
      '',
      '## Comments',
      ...visible.map((c) => `### @${oneLine(c.user?.login ?? 'unknown')} (${oneLine(c.created_at)}${stranger(c.author_association)})\n${quoted(c.body ?? '')}`),
    )
  return {
    key: { task_source: 'github', owner: ref.owner, repo: ref.repo, task_type: isPr ? 'pull_request' : 'issue', task_id: String(ref.number) },
    text: parts.join('\n'),
    seen: comments.map((c) => String(c.id)),
    channel: githubChannel(api, ref, config.github.bot_name, config.sources.trusted === 'write'),
    ...(pull ? { pull } : {}),
  }
}

/** Review threads not yet resolved, with their comments: only GraphQL knows which are resolved. */
async function unresolvedThreads(api: Client, ref: GithubRef): Promise<string[]> {
  const query = `query($owner: String!, $repo: String!, $number: Int!) {
    repository(owner: $owner, name: $repo) { pullRequest(number: $number) { reviewThreads(first: 100) { nodes {
      isResolved path line comments(first: 50) { nodes { author { login } body } } } } } } }`
  const where = `${ref.owner}/${ref.repo}#${ref.number}`
  const data = forgeReply(
    'GitHub',
    `${where}'s review threads`,
    GITHUB_THREADS,
    await call(where, () => api.graphql<unknown>(query, { owner: ref.owner, repo: ref.repo, number: ref.number })),
  )
  return data.repository.pullRequest.reviewThreads.nodes
    .filter((t) => !t.isResolved)
    .map(
      (t) =>
        `### ${oneLine(t.path)}${t.line ? `:${t.line}` : ''}\n${t.comments.nodes.map((c) => `@${oneLine(c.author?.login ?? 'unknown')}:\n${quoted(c.body)}`).join('\n')}`,
    )
}

/** The channel of a task that came from GitHub (a resumed one: its key says where). */
export function githubChannelFor(config: Config, ref: GithubRef): Channel {
  return githubChannel(client(config), ref, config.github.bot_name, config.sources.trusted === 'write')
}

/** `judge`: each comment says whether its author has write access by its author_association (docs/delivery.md#trust). */
function githubChannel(api: Client, ref: GithubRef, botName: string | null, judge: boolean): Channel {
  const where = `${ref.owner}/${ref.repo}#${ref.number}`
  return {
    name: where,
    botName,
    async listComments(since, signal) {
      const listed = await call(where, () =>
        api.paginate(api.rest.issues.listComments, {
          owner: ref.owner,
          repo: ref.repo,
          issue_number: ref.number,
          per_page: 100,
          ...(since ? { since } : {}),
          ...(signal ? { request: { signal } } : {}),
        }),
      )
      return forgeReply('GitHub', `${where}'s comments`, GITHUB_COMMENTS, listed).map(
        (c): RemoteComment => ({
          id: String(c.id),
          author: c.user?.login ?? 'unknown',
          body: c.body ?? '',
          created_at: c.created_at,
          ...(judge ? { trusted: WRITE_ASSOCIATIONS.has(c.author_association) } : {}),
        }),
      )
    },
    async post(body, signal) {
      const made = await call(where, () =>
        api.rest.issues.createComment({ owner: ref.owner, repo: ref.repo, issue_number: ref.number, body, ...(signal ? { request: { signal } } : {}) }),
      )
      return String(forgeReply('GitHub', `${where}'s new comment`, MADE, made).id)
    },
    async edit(id, body, signal) {
      await call(where, () =>
        api.rest.issues.updateComment({ owner: ref.owner, repo: ref.repo, comment_id: Number(id), body, ...(signal ? { request: { signal } } : {}) }),
      )
    },
  }
}

/**
 * A repository's open issues and pull requests by label (GitHub lists both as issues),
 * and their labels changed: for the poller (docs/contract.md §14.2). `stop` ends every call at once.
 */
export function githubTracker(config: Config, repository: string, stop?: AbortSignal): Tracker {
  const { owner, repo } = parseGithubRepo(repository)
  const api = client(config, stop)
  const where = `${owner}/${repo}`
  const names = (list: (string | { name?: string })[]) => list.map((l) => (typeof l === 'string' ? l : (l.name ?? '')))
  return {
    name: `github:${where}`,
    async listOpen(label) {
      const listed = await call(where, () => api.paginate(api.rest.issues.listForRepo, { owner, repo, labels: label, state: 'open', per_page: 100 }), stop)
      return forgeReply('GitHub', `${where}'s open issues labelled ${label}`, GITHUB_LISTED, listed).map(
        (i): LabelledItem => ({ ref: `${where}#${i.number}`, labels: names(i.labels) }),
      )
    },
    async current(ref) {
      const { number } = parseGithubRef(ref)
      try {
        const issue = forgeReply('GitHub', ref, GITHUB_ISSUE, await call(ref, () => api.rest.issues.get({ owner, repo, issue_number: number }), stop))
        return { ref, open: issue.state === 'open', labels: names(issue.labels) } satisfies CurrentItem
      } catch (err) {
        // Deleted, or moved to another repository: gone from this one.
        if (err instanceof CtxError && err.exitCode === 3) return null
        throw err
      }
    },
    async relabel(ref, add, remove) {
      const { number } = parseGithubRef(ref)
      // GitHub spaces writes a second apart: take off only what the item carries (a read is not spaced).
      const carried =
        remove.length > 1
          ? names(forgeReply('GitHub', ref, GITHUB_ISSUE, await call(ref, () => api.rest.issues.get({ owner, repo, issue_number: number }), stop)).labels)
          : remove
      for (const name of remove.filter((l) => carried.includes(l))) {
        await call(ref, () => api.rest.issues.removeLabel({ owner, repo, issue_number: number, name }), stop).catch((err: unknown) => {
          // Not carried (or already taken off by another poller): nothing to do.
          if (!(err instanceof CtxError && err.exitCode === 3)) throw err
        })
      }
      if (add !== null) await call(ref, () => api.rest.issues.addLabels({ owner, repo, issue_number: number, labels: [add] }), stop)
    },
  }
}

function labels(list: (string | { name?: string })[]): string {
  const names = list.map((l) => oneLine(typeof l === 'string' ? l : (l.name ?? ''), 60)).filter((n) => n !== '')
  return names.length > 0 ? `; labels: ${names.join(', ')}` : ''
}

/** One API call: the data, or one line saying what failed and what to check; `stop` aborting rejects it at once with its reason. */
export async function call<T>(where: string, fn: () => Promise<T | { data: T }>, stop?: AbortSignal): Promise<T> {
  try {
    const result = await raceAbort(fn, stop)
    return result !== null && typeof result === 'object' && 'data' in result && 'status' in result ? (result as { data: T }).data : (result as T)
  } catch (err) {
    if (stop?.aborted) throw err
    const status = (err as { status?: number }).status
    if (status === 401) throw new CtxError(`GitHub refused the token for ${where} (401)`, { hint: 'check GITHUB_TOKEN or github.token' })
    if ((status === 403 || status === 429) && /rate limit/i.test(firstLine(err)))
      throw new CtxError(`GitHub's rate limit stops requests for ${where} (${status}): ${firstLine(err)}`, {
        hint: 'wait until the limit resets, or use another token',
      })
    if (status === 403)
      throw new CtxError(`GitHub denied access to ${where} (403): ${firstLine(err)}`, {
        hint: 'the token needs repo access (issues and pull requests: read and write)',
      })
    if (status === 404)
      throw new CtxError(`GitHub has no ${where} (404)`, {
        exitCode: 3,
        hint: 'check the owner, repository and number, and that the token can see the repository',
      })
    throw new CtxError(`GitHub request for ${where} failed${status ? ` (${status})` : ''}: ${firstLine(err)}`, { hint: 'check github.api_url and the network' })
  }
}

function firstLine(err: unknown): string {
  return ((err as Error).message.split('\n')[0] ?? '').slice(0, 200)
}
