import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { onTestFinished } from 'vitest'
import { githubReviewRoute, gitlabReviewRoute, pullOf, userId } from './fake-board-review.js'

/**
 * A repository with many issues, for `poll`: GitHub's REST API (`/repos/acme/shop/...`)
 * and GitLab's v4 (`/api/v4/projects/acme%2Fbackend%2Fapi/...`) on one 127.0.0.1 server,
 * in the shapes of their documentation: list by label and state (paged as the forges
 * page, with a Link header), labels added and removed, and what `run --github`/`--gitlab`
 * reads and posts (the item, its comments; a pull request's branches and review threads).
 * Reached through the real @octokit/rest and @gitbeaker/rest.
 */
export interface BoardItem {
  number: number
  /** GitHub: issue or pull_request (listed among the issues, as GitHub does); GitLab: issue or merge_request. */
  kind: 'issue' | 'merge_request' | 'pull_request'
  title: string
  open: boolean
  labels: string[]
  comments: { id: number; body: string; author: string; at: string; association?: string }[]
  /** A pull/merge request's body, author, head branch and head commit (defaults: Body of N, bob/alice, fix-N, abc). */
  body?: string
  author?: string
  branch?: string
  sha?: string
  /** Who put a label on (default: maintainer, a writer). */
  labeledBy?: Record<string, string>
  reviews?: { id: number; state: string; body: string; author: string; association: string }[]
  reviewComments?: { id: number; body: string; author: string; association: string; path: string; line: number }[]
}

export interface FakeBoard {
  url: string
  githubToken: string
  gitlabToken: string
  github: BoardItem[]
  gitlab: BoardItem[]
  requests: { method: string; path: string; body: unknown }[]
  /** The next requests matching method and path prefix get this status (and headers) instead. */
  failures: { method: string; path: string; status: number; headers?: Record<string, string>; message: string }[]
  /** Requests matching method and path prefix are accepted and never answered (a forge that hangs). */
  hang: { method: string; path: string }[]
  /** Awaited before a request is handled (e.g. to stop the database at that moment). */
  onRequest: ((r: { method: string; path: string }) => void | Promise<void>) | null
  /** Called once a request has been answered (e.g. to change an item after a listing was sent). */
  onAnswered: ((r: { method: string; path: string }) => void) | null
  add(forge: 'github' | 'gitlab', number: number, labels: string[], kind?: BoardItem['kind']): BoardItem
  /** GitHub permission by login (default read); GitLab access level by username (default: not a member). */
  permissions: Record<string, string>
  gitlabAccess: Record<string, number>
  /** Check runs and commit statuses by commit; logs by Actions job or GitLab job id; pipelines by MR iid; failed jobs by pipeline. */
  checks: Record<string, { id: number; name: string; conclusion: string; title: string; summary: string }[]>
  statuses: Record<string, { id: number; context: string; state: string; description: string }[]>
  logs: Record<number, string>
  pipelines: Record<number, { id: number; sha: string; status: string }[]>
  pipelineJobs: Record<number, { id: number; name: string; stage: string }[]>
}

const GITHUB = '/repos/acme/shop'
const GITLAB = `/api/v4/projects/${encodeURIComponent('acme/backend/api')}`

export async function startFakeBoard(): Promise<FakeBoard> {
  let nextId = 9000
  const board: FakeBoard = {
    url: '',
    githubToken: 'ghp_boardtoken0000000000000000000000000',
    gitlabToken: 'glpat-boardtoken000000000',
    github: [],
    gitlab: [],
    requests: [],
    failures: [],
    hang: [],
    onRequest: null,
    onAnswered: null,
    permissions: { maintainer: 'write' },
    gitlabAccess: { maintainer: 30 },
    checks: {},
    statuses: {},
    logs: {},
    pipelines: {},
    pipelineJobs: {},
    add(forge, number, labels, kind = 'issue') {
      const item: BoardItem = { number, kind, title: `Item ${number}`, open: true, labels, comments: [] }
      board[forge].push(item)
      return item
    },
  }
  const at = '2026-11-01T09:00:00Z'
  const githubUser = (login: string) => ({ login, id: login.length, node_id: `U_${login}`, type: 'User', site_admin: false })
  const githubLabel = (name: string) => ({ id: name.length, node_id: `L_${name}`, name, color: 'ededed', default: false })
  const githubIssue = (i: BoardItem) => ({
    id: i.number,
    node_id: `I_${i.number}`,
    number: i.number,
    title: i.title,
    body: `Body of ${i.number}`,
    state: i.open ? 'open' : 'closed',
    locked: false,
    user: githubUser('alice'),
    labels: i.labels.map(githubLabel),
    comments: i.comments.length,
    created_at: at,
    updated_at: at,
    html_url: `https://github.example/acme/shop/issues/${i.number}`,
    ...(i.kind === 'pull_request'
      ? {
          pull_request: {
            url: `${board.url}${GITHUB}/pulls/${i.number}`,
            html_url: `https://github.example/acme/shop/pull/${i.number}`,
            diff_url: 'x',
            patch_url: 'x',
          },
        }
      : {}),
  })
  const gitlabAuthor = (username: string) => ({
    id: userId(username),
    username,
    name: username,
    state: 'active',
    web_url: `https://gitlab.example/${username}`,
  })
  const gitlabItem = (i: BoardItem) => ({
    id: 1000 + i.number,
    iid: i.number,
    project_id: 3,
    title: i.title,
    description: i.body ?? `Body of ${i.number}`,
    state: i.open ? 'opened' : 'closed',
    author: gitlabAuthor(i.author ?? 'alice'),
    labels: i.labels,
    sha: i.sha ?? 'abc',
    created_at: at,
    web_url: `https://gitlab.example/acme/backend/api/-/${i.kind === 'issue' ? 'issues' : 'merge_requests'}/${i.number}`,
    ...(i.kind === 'merge_request' ? { source_branch: i.branch ?? 'fix', target_branch: 'main' } : {}),
  })
  const gitlabNote = (c: BoardItem['comments'][number], i: BoardItem) => ({
    id: c.id,
    type: null,
    body: c.body,
    attachment: null,
    author: gitlabAuthor(c.author),
    created_at: c.at,
    updated_at: c.at,
    system: false,
    noteable_iid: i.number,
    resolvable: false,
  })
  const matches = (i: BoardItem, labels: string | null) => labels === null || labels.split(',').every((l) => i.labels.includes(l))
  /** One page of `all` as the forges page it: `page`/`per_page`, and a Link header to the next page. */
  const paged = <T>(url: URL, all: T[], defaultPerPage: number): { page: T[]; headers: Record<string, string> } => {
    const perPage = Number(url.searchParams.get('per_page') ?? defaultPerPage)
    const page = Number(url.searchParams.get('page') ?? 1)
    const headers: Record<string, string> = {}
    if (page * perPage < all.length) {
      const next = new URL(url.pathname + url.search, board.url)
      next.searchParams.set('page', String(page + 1))
      headers.link = `<${next.href}>; rel="next"`
    }
    return { page: all.slice((page - 1) * perPage, page * perPage), headers }
  }
  const hanging: import('node:http').ServerResponse[] = []

  const server = createServer((req, res) => {
    let raw = ''
    req.on('data', (d: Buffer) => (raw += d.toString()))
    req.on('end', async () => {
      const url = new URL(req.url ?? '/', 'http://x')
      const body = raw ? (JSON.parse(raw) as Record<string, unknown>) : null
      const path = url.pathname
      const method = req.method ?? ''
      board.requests.push({ method, path: path + url.search, body })
      await board.onRequest?.({ method, path: path + url.search })
      if (board.hang.some((h) => h.method === method && path.startsWith(h.path))) {
        hanging.push(res)
        return
      }
      const send = (status: number, data: unknown, headers: Record<string, string> = {}) => {
        res.writeHead(status, { 'content-type': 'application/json; charset=utf-8', ...headers })
        // A log is plain text, as the forges send it.
        res.end(typeof data === 'string' && headers['content-type']?.startsWith('text/') ? data : JSON.stringify(data))
        board.onAnswered?.({ method, path: path + url.search })
      }
      const failure = board.failures.findIndex((f) => f.method === method && path.startsWith(f.path))
      if (failure >= 0) {
        const [f] = board.failures.splice(failure, 1)
        return send(f?.status ?? 500, { message: f?.message, documentation_url: 'https://docs.github.com/rest' }, f?.headers)
      }
      if (path.startsWith('/api/v4/')) {
        if (req.headers['private-token'] !== board.gitlabToken) return send(401, { message: '401 Unauthorized' })
        if (gitlabReviewRoute(board, method, path, send)) return
        const list = /^(.*)\/(issues|merge_requests)$/.exec(path)
        if (method === 'GET' && list && list[1] === GITLAB) {
          const kind = list[2] === 'issues' ? 'issue' : 'merge_request'
          const state = url.searchParams.get('state')
          const { page, headers } = paged(
            url,
            board.gitlab.filter((i) => i.kind === kind && (state !== 'opened' || i.open) && matches(i, url.searchParams.get('labels'))),
            20,
          )
          return send(200, page.map(gitlabItem), headers)
        }
        const one = /^(.*)\/(issues|merge_requests)\/(\d+)(\/notes|\/discussions)?(?:\/(\d+))?$/.exec(path)
        const item =
          one && one[1] === GITLAB
            ? board.gitlab.find((i) => i.number === Number(one[3]) && i.kind === (one[2] === 'issues' ? 'issue' : 'merge_request'))
            : undefined
        if (!one || !item) return send(404, { message: '404 Not found' })
        if (one[4] === undefined && method === 'GET') return send(200, gitlabItem(item))
        if (one[4] === undefined && method === 'PUT') {
          const split = (v: unknown) => (typeof v === 'string' && v !== '' ? v.split(',') : [])
          item.labels = item.labels.filter((l) => !split(body?.remove_labels).includes(l))
          for (const l of split(body?.add_labels)) if (!item.labels.includes(l)) item.labels.push(l)
          return send(200, gitlabItem(item))
        }
        if (one[4] === '/discussions') return send(200, [])
        if (method === 'GET')
          return send(
            200,
            item.comments.map((c) => gitlabNote(c, item)),
          )
        if (method === 'POST') {
          const c = { id: nextId++, body: String(body?.body ?? ''), author: 'ctxagent-bot', at: new Date().toISOString() }
          item.comments.push(c)
          return send(201, gitlabNote(c, item))
        }
        const note = item.comments.find((c) => c.id === Number(one[5]))
        if (method === 'PUT' && note) {
          note.body = String(body?.body ?? '')
          return send(200, gitlabNote(note, item))
        }
        return send(404, { message: '404 Not found' })
      }
      if (req.headers.authorization !== `token ${board.githubToken}`)
        return send(401, { message: 'Bad credentials', documentation_url: 'https://docs.github.com/rest' })
      const rate = { 'x-ratelimit-limit': '5000', 'x-ratelimit-remaining': '4999' }
      if (githubReviewRoute(board, method, path, (status, data, headers) => send(status, data, { ...rate, ...headers }))) return
      if (method === 'GET' && path === `${GITHUB}/issues`) {
        const state = url.searchParams.get('state') ?? 'open'
        const { page, headers } = paged(
          url,
          board.github.filter((i) => (state === 'all' || i.open === (state === 'open')) && matches(i, url.searchParams.get('labels'))),
          30,
        )
        return send(200, page.map(githubIssue), { ...rate, ...headers })
      }
      const pull = new RegExp(`^${GITHUB}/pulls/(\\d+)$`).exec(path)
      if (pull && method === 'GET') {
        const pr = board.github.find((i) => i.number === Number(pull[1]) && i.kind === 'pull_request')
        return pr ? send(200, pullOf(board, pr), rate) : send(404, { message: 'Not Found', documentation_url: 'https://docs.github.com/rest' })
      }
      // The review threads of a pull request (only GraphQL says which are resolved): none.
      if (method === 'POST' && path === '/graphql') return send(200, { data: { repository: { pullRequest: { reviewThreads: { nodes: [] } } } } })
      const edit = new RegExp(`^${GITHUB}/issues/comments/(\\d+)$`).exec(path)
      if (edit) {
        const comment = board.github.flatMap((i) => i.comments).find((c) => c.id === Number(edit[1]))
        if (method !== 'PATCH' || !comment) return send(404, { message: 'Not Found' })
        comment.body = String(body?.body ?? '')
        return send(200, { id: comment.id, body: comment.body, user: githubUser(comment.author), created_at: comment.at, updated_at: comment.at })
      }
      const one = new RegExp(`^${GITHUB}/issues/(\\d+)(/comments|/labels)?(?:/(.+))?$`).exec(path)
      const item = one ? board.github.find((i) => i.number === Number(one[1])) : undefined
      if (!one || !item) return send(404, { message: 'Not Found', documentation_url: 'https://docs.github.com/rest' })
      const comment = (c: BoardItem['comments'][number]) => ({
        id: c.id,
        node_id: `IC_${c.id}`,
        body: c.body,
        user: githubUser(c.author),
        created_at: c.at,
        updated_at: c.at,
        html_url: 'x',
        author_association: c.association ?? 'MEMBER',
      })
      if (one[2] === undefined && method === 'GET') return send(200, githubIssue(item), rate)
      if (one[2] === '/comments' && method === 'GET') return send(200, item.comments.map(comment), rate)
      if (one[2] === '/comments' && method === 'POST') {
        const c = { id: nextId++, body: String(body?.body ?? ''), author: 'ctxagent-bot', at: new Date().toISOString() }
        item.comments.push(c)
        return send(201, comment(c), rate)
      }
      if (one[2] === '/labels' && method === 'POST') {
        for (const l of (body?.labels as string[] | undefined) ?? []) if (!item.labels.includes(l)) item.labels.push(l)
        return send(200, item.labels.map(githubLabel), rate)
      }
      if (one[2] === '/labels' && method === 'DELETE' && one[3] !== undefined) {
        const name = decodeURIComponent(one[3])
        if (!item.labels.includes(name)) return send(404, { message: 'Label does not exist', documentation_url: 'https://docs.github.com/rest' })
        item.labels = item.labels.filter((l) => l !== name)
        return send(200, item.labels.map(githubLabel), rate)
      }
      send(404, { message: 'Not Found', documentation_url: 'https://docs.github.com/rest' })
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  board.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  onTestFinished(() => {
    for (const res of hanging) res.destroy()
    server.closeAllConnections()
    return new Promise<void>((resolve) => server.close(() => resolve()))
  })
  return board
}
