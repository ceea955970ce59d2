import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { onTestFinished } from 'vitest'
import type { GitHandler } from './git-http.js'

/**
 * A GitLab REST API v4 server on 127.0.0.1 for one project, answering in the shapes of
 * GitLab's API documentation (issues, merge requests, notes, discussions), reached
 * through the real @gitbeaker/rest. Requests are recorded.
 */
export interface FakeGitlab {
  url: string
  token: string
  project: string
  item: Record<string, unknown>
  notes: Record<string, unknown>[]
  discussions: Record<string, unknown>[]
  requests: { method: string; path: string; body: unknown }[]
  addNote(username: string, body: string, system?: boolean): Record<string, unknown>
  /** Merge requests opened through the API (POST /projects/:id/merge_requests), in GitLab's shape. */
  mergeRequests: Record<string, unknown>[]
  /** By merge request iid: its commits (newest first, as GitLab lists them) and notes (GET merge_requests/:iid/commits, /notes). */
  mrCommits: Record<number, Record<string, unknown>[]>
  mrNotes: Record<number, Record<string, unknown>[]>
  /** By merge request iid: its diffs and the issues it closes (GET merge_requests/:iid/diffs, /closes_issues). */
  mrDiffs: Record<number, Record<string, unknown>[]>
  mrClosesIssues: Record<number, Record<string, unknown>[]>
}

/** A user as GitLab's API shows one. */
export const gitlabUser = (username: string) => ({
  id: username.length,
  username,
  name: username,
  state: 'active',
  web_url: `https://gitlab.example/${username}`,
})

/** With `git`, the server is the forge's git host too: paths holding `.git/` are git's smart HTTP (test/helpers/git-http.ts). */
export async function startFakeGitlab(options: { mr?: boolean; git?: GitHandler } = {}): Promise<FakeGitlab> {
  const project = 'acme/backend/api'
  const iid = options.mr ? 12 : 7
  let nextId = 500
  const author = gitlabUser
  const fake: FakeGitlab = {
    url: '',
    token: 'glpat-faketoken00000000000',
    project,
    item: {
      id: 99,
      iid,
      project_id: 3,
      title: options.mr ? 'Fix the pagination of /orders' : 'Pagination of /orders skips a page',
      description: 'Page 2 repeats page 1 when per_page=50.',
      state: 'opened',
      author: author('alice'),
      labels: ['bug', 'api'],
      created_at: '2026-11-01T09:00:00.000Z',
      web_url: `https://gitlab.example/${project}/-/${options.mr ? 'merge_requests' : 'issues'}/${iid}`,
      ...(options.mr ? { source_branch: 'fix-pagination', target_branch: 'main' } : {}),
    },
    notes: [],
    discussions: [],
    requests: [],
    mergeRequests: [],
    mrCommits: {},
    mrNotes: {},
    mrDiffs: {},
    mrClosesIssues: {},
    addNote: (username, body, system = false) => {
      const at = new Date().toISOString()
      const note = {
        id: nextId++,
        type: null,
        body,
        attachment: null,
        author: author(username),
        created_at: at,
        updated_at: at,
        system,
        noteable_id: 99,
        noteable_type: options.mr ? 'MergeRequest' : 'Issue',
        noteable_iid: iid,
        resolvable: false,
        confidential: false,
        internal: false,
      }
      fake.notes.push(note)
      return note
    },
  }
  const base = `/api/v4/projects/${encodeURIComponent(project)}/${options.mr ? 'merge_requests' : 'issues'}/${iid}`
  const server = createServer((req, res) => {
    if (options.git && /\.git(\/|$)/.test(req.url ?? '')) return options.git(req, res)
    let raw = ''
    req.on('data', (d: Buffer) => (raw += d.toString()))
    req.on('end', () => {
      const url = new URL(req.url ?? '/', 'http://x')
      const body = raw ? (JSON.parse(raw) as Record<string, unknown>) : null
      const path = url.pathname
      fake.requests.push({ method: req.method ?? '', path: path + url.search, body })
      const send = (status: number, data: unknown) => {
        res.writeHead(status, { 'content-type': 'application/json' })
        res.end(JSON.stringify(data))
      }
      if (req.headers['private-token'] !== fake.token) return send(401, { message: '401 Unauthorized' })
      if (req.method === 'GET' && path === '/api/v4/user') return send(200, author('ctxagent-bot'))
      if (req.method === 'GET' && path === '/api/v4/personal_access_tokens/self') return send(200, { id: 1, name: 'ctxagent', scopes: ['api'], active: true })
      if (req.method === 'GET' && path === base) return send(200, fake.item)
      if (req.method === 'GET' && path === `${base}/notes`) return send(200, fake.notes)
      if (req.method === 'POST' && path === `${base}/notes`) return send(201, fake.addNote('ctxagent-bot', String(body?.body ?? '')))
      const edit = /\/notes\/(\d+)$/.exec(path)
      if (req.method === 'PUT' && edit && path.startsWith(base)) {
        const note = fake.notes.find((n) => n.id === Number(edit[1]))
        if (!note) return send(404, { message: '404 Not found' })
        note.body = body?.body
        return send(200, note)
      }
      if (req.method === 'GET' && path === `${base}/discussions`) return send(200, fake.discussions)
      // Merge requests (docs.gitlab.com/api/merge_requests): list by source branch, create; the project's default branch.
      const projectPath = `/api/v4/projects/${encodeURIComponent(project)}`
      if (req.method === 'GET' && path === projectPath)
        return send(200, {
          id: 3,
          path_with_namespace: project,
          default_branch: 'main',
          web_url: `https://gitlab.example/${project}`,
          http_url_to_repo: `${fake.url}/${project}.git`,
        })
      if (req.method === 'GET' && path === `${projectPath}/merge_requests`) {
        const source = url.searchParams.get('source_branch')
        const state = url.searchParams.get('state')
        return send(
          200,
          fake.mergeRequests.filter((m) => (source === null || m.source_branch === source) && (state === null || state === 'all' || m.state === state)),
        )
      }
      // One merge request (docs.gitlab.com/api/merge_requests), its commits and its notes.
      const onMr = new RegExp(`^${projectPath.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}/merge_requests/(\\d+)(/commits|/notes|/diffs|/closes_issues)?$`).exec(
        path,
      )
      const mrListed = onMr ? fake.mergeRequests.find((m) => m.iid === Number(onMr[1])) : undefined
      if (req.method === 'GET' && onMr && mrListed) {
        const n = Number(onMr[1])
        if (onMr[2] === undefined) return send(200, mrListed)
        const parts: Record<string, Record<number, Record<string, unknown>[]>> = {
          '/commits': fake.mrCommits,
          '/notes': fake.mrNotes,
          '/diffs': fake.mrDiffs,
          '/closes_issues': fake.mrClosesIssues,
        }
        return send(200, parts[onMr[2]]?.[n] ?? [])
      }
      if (req.method === 'POST' && path === `${projectPath}/merge_requests`) {
        const b = body as { source_branch?: string; target_branch?: string; title?: string; description?: string; labels?: string }
        if (!b.source_branch || !b.target_branch || !b.title) return send(400, { message: 'source_branch, target_branch and title are missing' })
        if (fake.mergeRequests.some((m) => m.source_branch === b.source_branch && m.state === 'opened'))
          return send(409, { message: ['Another open merge request already exists for this source branch'] })
        const mrIid = 20 + fake.mergeRequests.length
        const at = new Date().toISOString()
        const mr = {
          id: 7000 + mrIid,
          iid: mrIid,
          project_id: 3,
          title: b.title,
          description: b.description ?? null,
          state: 'opened',
          draft: b.title.startsWith('Draft:'),
          source_branch: b.source_branch,
          target_branch: b.target_branch,
          labels: b.labels ? b.labels.split(',') : [],
          author: author('ctxagent-bot'),
          created_at: at,
          updated_at: at,
          web_url: `https://gitlab.example/${project}/-/merge_requests/${mrIid}`,
        }
        fake.mergeRequests.push(mr)
        return send(201, mr)
      }
      send(404, { message: '404 Not found' })
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  fake.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  onTestFinished(() => new Promise<void>((resolve) => server.close(() => resolve())))
  return fake
}
