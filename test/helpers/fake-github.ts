import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { onTestFinished } from 'vitest'
import type { GitHandler } from './git-http.js'

/**
 * A GitHub REST (and GraphQL) server on 127.0.0.1 for one repository, answering in
 * the shapes of GitHub's REST API documentation (issues, issue comments, pulls,
 * review threads), reached through the real @octokit/rest. Requests are recorded.
 */
export interface FakeGithub {
  url: string
  token: string
  issue: Record<string, unknown>
  pull: Record<string, unknown> | null
  comments: Record<string, unknown>[]
  threads: { isResolved: boolean; path: string; line: number; comments: { author: string; body: string }[] }[]
  requests: { method: string; path: string; body: unknown }[]
  /** Answers for the next requests matching a method and path prefix, before the normal one. */
  failures: { method: string; path: string; status: number; headers?: Record<string, string>; message: string }[]
  /** A reply (any JSON) for the next request matching a method and exact path, instead of the normal one: a server that is not quite GitHub. */
  replies: { method: string; path: string; status: number; body: unknown }[]
  /** While set, every request is recorded and then waits for it (a server that has stopped answering). */
  gate: Promise<void> | null
  /** Adds a comment as a person would, now. */
  addComment(login: string, body: string): Record<string, unknown>
  /** Pull requests opened through the API (POST /repos/{owner}/{repo}/pulls), in GitHub's shape. */
  pulls: Record<string, unknown>[]
  /** While set, a pull request is opened and its answer waits for it (a client that dies before it hears it). */
  holdOpened: Promise<void> | null
  /** By pull request number: its commits, reviews and (issue) comments, in GitHub's shapes (GET pulls/N/commits, pulls/N/reviews, issues/N/comments). */
  pullCommits: Record<number, Record<string, unknown>[]>
  pullReviews: Record<number, Record<string, unknown>[]>
  pullComments: Record<number, Record<string, unknown>[]>
  /** By pull request number: the files it changed, in GitHub's shape (GET pulls/N/files). */
  pullFiles: Record<number, Record<string, unknown>[]>
  /** More issues by number, in GitHub's shape (GET issues/N), beside the one of `number`. */
  issues: Record<number, Record<string, unknown>>
}

/** A user as GitHub's REST API shows one (`type` Bot for a login ending in [bot]). */
export const githubUser = (login: string, id: number) => ({ login, id, node_id: `U_${id}`, type: login.endsWith('[bot]') ? 'Bot' : 'User', site_admin: false })

const user = githubUser

/** With `git`, the server is the forge's git host too: paths holding `.git/` are git's smart HTTP (test/helpers/git-http.ts). */
export async function startFakeGithub(options: { owner?: string; repo?: string; number?: number; pr?: boolean; git?: GitHandler } = {}): Promise<FakeGithub> {
  const owner = options.owner ?? 'acme'
  const repo = options.repo ?? 'shop'
  const number = options.number ?? 42
  let nextId = 1000
  const now = () => new Date().toISOString()
  const fake: FakeGithub = {
    url: '',
    token: 'ghp_faketoken000000000000000000000000000',
    issue: {
      id: 1,
      node_id: 'I_1',
      number,
      title: 'CSV export drops the last row',
      state: 'open',
      locked: false,
      body: 'Exporting 3 orders gives a CSV with 2 rows.\n\nSteps: export any list of orders.',
      user: user('alice', 1),
      labels: [{ id: 1, node_id: 'L_1', name: 'bug', color: 'd73a4a', default: true }],
      comments: 0,
      created_at: '2026-11-01T09:00:00Z',
      updated_at: '2026-11-01T09:00:00Z',
      html_url: `https://github.example/${owner}/${repo}/issues/${number}`,
      ...(options.pr ? { pull_request: { url: 'x', html_url: 'x', diff_url: 'x', patch_url: 'x' } } : {}),
    },
    pull: options.pr
      ? {
          id: 2,
          number,
          title: 'Fix the CSV export',
          body: 'Closes #41',
          state: 'open',
          user: user('bob', 2),
          labels: [],
          head: { ref: 'fix-csv', sha: 'abc' },
          base: { ref: 'main', sha: 'def' },
          html_url: `https://github.example/${owner}/${repo}/pull/${number}`,
        }
      : null,
    comments: [],
    threads: [],
    requests: [],
    failures: [],
    replies: [],
    gate: null,
    pulls: [],
    holdOpened: null,
    pullCommits: {},
    pullReviews: {},
    pullComments: {},
    pullFiles: {},
    issues: {},
    addComment: (login, body) => {
      const at = now()
      const comment = {
        id: nextId++,
        node_id: `IC_${nextId}`,
        body,
        user: user(login, nextId),
        created_at: at,
        updated_at: at,
        html_url: 'x',
        author_association: 'MEMBER',
      }
      fake.comments.push(comment)
      return comment
    },
  }
  const base = `/repos/${owner}/${repo}`
  const server = createServer((req, res) => {
    if (options.git && /\.git(\/|$)/.test(req.url ?? '')) return options.git(req, res)
    let raw = ''
    req.on('data', (d: Buffer) => (raw += d.toString()))
    req.on('end', async () => {
      const url = new URL(req.url ?? '/', 'http://x')
      const body = raw ? (JSON.parse(raw) as Record<string, unknown>) : null
      fake.requests.push({ method: req.method ?? '', path: url.pathname + url.search, body })
      if (fake.gate !== null) await fake.gate
      const send = (status: number, data: unknown, headers: Record<string, string> = {}) => {
        res.writeHead(status, { 'content-type': 'application/json; charset=utf-8', 'x-ratelimit-limit': '5000', 'x-ratelimit-remaining': '4999', ...headers })
        res.end(JSON.stringify(data))
      }
      if (req.headers.authorization !== `token ${fake.token}` && req.headers.authorization !== `bearer ${fake.token}`) {
        return send(401, { message: 'Bad credentials', documentation_url: 'https://docs.github.com/rest', status: '401' })
      }
      const failure = fake.failures.findIndex((f) => f.method === req.method && url.pathname.startsWith(f.path))
      if (failure >= 0) {
        const [f] = fake.failures.splice(failure, 1)
        return send(f?.status ?? 500, { message: f?.message, documentation_url: 'https://docs.github.com/rest' }, f?.headers)
      }
      const path = url.pathname
      const reply = fake.replies.findIndex((r) => r.method === req.method && r.path === path)
      if (reply >= 0) {
        const [r] = fake.replies.splice(reply, 1)
        return send(r?.status ?? 200, r?.body)
      }
      if (req.method === 'GET' && path === '/user') return send(200, user('ctxagent-bot', 7), { 'x-oauth-scopes': 'repo, read:org' })
      if (req.method === 'GET' && path === `${base}/issues/${number}`) return send(200, { ...fake.issue, comments: fake.comments.length })
      if (req.method === 'GET' && path === `${base}/pulls/${number}` && fake.pull) return send(200, fake.pull)
      if (req.method === 'GET' && path === `${base}/issues/${number}/comments`) {
        const since = url.searchParams.get('since')
        return send(
          200,
          fake.comments.filter((c) => since === null || String(c.updated_at) >= since),
        )
      }
      if (req.method === 'POST' && path === `${base}/issues/${number}/comments`) {
        const made = fake.addComment('ctxagent-bot', String(body?.body ?? ''))
        return send(201, made)
      }
      const edit = new RegExp(`^${base}/issues/comments/(\\d+)$`).exec(path)
      if (req.method === 'PATCH' && edit) {
        const comment = fake.comments.find((c) => c.id === Number(edit[1]))
        if (!comment) return send(404, { message: 'Not Found' })
        comment.body = body?.body
        comment.updated_at = now()
        return send(200, comment)
      }
      // Pulls (docs.github.com/rest/pulls/pulls): list by head, create; labels through the issues API.
      if (req.method === 'GET' && path === base)
        return send(200, {
          id: 10,
          name: repo,
          full_name: `${owner}/${repo}`,
          private: false,
          default_branch: 'main',
          owner: user(owner, 3),
          clone_url: `${fake.url}/${owner}/${repo}.git`,
          html_url: `https://github.example/${owner}/${repo}`,
        })
      if (req.method === 'GET' && path === `${base}/pulls`) {
        const head = url.searchParams.get('head')
        const state = url.searchParams.get('state') ?? 'open'
        return send(
          200,
          fake.pulls.filter((p) => (head === null || `${owner}:${(p.head as { ref: string }).ref}` === head) && (state === 'all' || p.state === state)),
        )
      }
      if (req.method === 'POST' && path === `${base}/pulls`) {
        const b = body as { title?: string; head?: string; base?: string; body?: string; draft?: boolean }
        if (!b.title || !b.head || !b.base) return send(422, { message: 'Validation Failed', errors: [{ resource: 'PullRequest', code: 'missing_field' }] })
        if (fake.pulls.some((p) => (p.head as { ref: string }).ref === b.head && p.state === 'open'))
          return send(422, {
            message: 'Validation Failed',
            errors: [{ resource: 'PullRequest', code: 'custom', message: `A pull request already exists for ${owner}:${b.head}.` }],
          })
        const n = 100 + fake.pulls.length
        const at = now()
        const pull = {
          id: 5000 + n,
          node_id: `PR_${n}`,
          number: n,
          state: 'open',
          locked: false,
          title: b.title,
          body: b.body ?? null,
          draft: b.draft === true,
          user: user('ctxagent-bot', 7),
          labels: [] as unknown[],
          head: { label: `${owner}:${b.head}`, ref: b.head, sha: 'unknown' },
          base: { label: `${owner}:${b.base}`, ref: b.base, sha: 'unknown' },
          html_url: `https://github.example/${owner}/${repo}/pull/${n}`,
          url: `${fake.url}${base}/pulls/${n}`,
          created_at: at,
          updated_at: at,
          merged_at: null,
        }
        fake.pulls.push(pull)
        if (fake.holdOpened !== null) await fake.holdOpened
        return send(201, pull)
      }
      // One pull request, its commits and reviews (docs.github.com/rest/pulls); its conversation and who closed it through the issues API.
      const onPull = new RegExp(`^${base}/(pulls|issues)/(\\d+)(/commits|/reviews|/comments|/files)?$`).exec(path)
      const listed = onPull ? fake.pulls.find((p) => p.number === Number(onPull[2])) : undefined
      if (req.method === 'GET' && onPull && listed) {
        const n = Number(onPull[2])
        const [, kind, , part] = onPull
        if (part === undefined) return send(200, kind === 'pulls' ? listed : { ...listed, pull_request: { url: listed.url, html_url: listed.html_url } })
        if (kind === 'pulls' && part === '/commits') return send(200, fake.pullCommits[n] ?? [])
        if (kind === 'pulls' && part === '/reviews') return send(200, fake.pullReviews[n] ?? [])
        if (kind === 'pulls' && part === '/files') return send(200, fake.pullFiles[n] ?? [])
        if (kind === 'issues' && part === '/comments') return send(200, fake.pullComments[n] ?? [])
      }
      const another = new RegExp(`^${base}/issues/(\\d+)$`).exec(path)
      const issue = another ? fake.issues[Number(another[1])] : undefined
      if (req.method === 'GET' && issue) return send(200, issue)
      const labelled = new RegExp(`^${base}/issues/(\\d+)/labels$`).exec(path)
      if (req.method === 'POST' && labelled) {
        const target = Number(labelled[1]) === number ? fake.issue : fake.pulls.find((p) => p.number === Number(labelled[1]))
        if (!target) return send(404, { message: 'Not Found' })
        const names = ((body as { labels?: string[] }).labels ?? []).map((name, i) => ({
          id: 900 + i,
          node_id: `L_${name}`,
          name,
          color: 'ededed',
          default: false,
        }))
        target.labels = [...(target.labels as unknown[]), ...names]
        return send(200, target.labels)
      }
      // A label taken off (docs.github.com/rest/issues/labels#remove-a-label-from-an-issue): 404 when the item does not carry it.
      const unlabelled = new RegExp(`^${base}/issues/(\\d+)/labels/([^/]+)$`).exec(path)
      if (req.method === 'DELETE' && unlabelled) {
        const target = Number(unlabelled[1]) === number ? fake.issue : fake.pulls.find((p) => p.number === Number(unlabelled[1]))
        const name = decodeURIComponent(unlabelled[2] as string)
        const carried = (target?.labels ?? []) as { name: string }[]
        if (!target || !carried.some((l) => l.name === name)) return send(404, { message: 'Label does not exist' })
        target.labels = carried.filter((l) => l.name !== name)
        return send(200, target.labels)
      }
      if (req.method === 'POST' && path === '/graphql') {
        const nodes = fake.threads.map((t) => ({
          isResolved: t.isResolved,
          path: t.path,
          line: t.line,
          comments: { nodes: t.comments.map((c) => ({ author: { login: c.author }, body: c.body })) },
        }))
        return send(200, { data: { repository: { pullRequest: { reviewThreads: { nodes } } } } })
      }
      send(404, { message: 'Not Found', documentation_url: 'https://docs.github.com/rest' })
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  fake.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  onTestFinished(() => new Promise<void>((resolve) => server.close(() => resolve())))
  return fake
}
