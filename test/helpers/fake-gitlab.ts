import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { onTestFinished } from 'vitest'

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
}

export async function startFakeGitlab(options: { mr?: boolean } = {}): Promise<FakeGitlab> {
  const project = 'acme/backend/api'
  const iid = options.mr ? 12 : 7
  let nextId = 500
  const author = (username: string) => ({ id: username.length, username, name: username, state: 'active', web_url: `https://gitlab.example/${username}` })
  const fake: FakeGitlab = {
    url: '',
    token: 'glpat-faketoken00000000000',
    project,
    item: {
      id: 99, iid, project_id: 3, title: options.mr ? 'Fix the pagination of /orders' : 'Pagination of /orders skips a page',
      description: 'Page 2 repeats page 1 when per_page=50.', state: 'opened', author: author('alice'), labels: ['bug', 'api'],
      created_at: '2026-11-01T09:00:00.000Z', web_url: `https://gitlab.example/${project}/-/issues/${iid}`,
      ...(options.mr ? { source_branch: 'fix-pagination', target_branch: 'main' } : {}),
    },
    notes: [],
    discussions: [],
    requests: [],
    addNote: (username, body, system = false) => {
      const at = new Date().toISOString()
      const note = { id: nextId++, type: null, body, attachment: null, author: author(username), created_at: at, updated_at: at, system, noteable_id: 99, noteable_type: options.mr ? 'MergeRequest' : 'Issue', noteable_iid: iid, resolvable: false, confidential: false, internal: false }
      fake.notes.push(note)
      return note
    },
  }
  const base = `/api/v4/projects/${encodeURIComponent(project)}/${options.mr ? 'merge_requests' : 'issues'}/${iid}`
  const server = createServer((req, res) => {
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
      send(404, { message: '404 Not found' })
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  fake.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  onTestFinished(() => new Promise<void>((resolve) => server.close(() => resolve())))
  return fake
}
