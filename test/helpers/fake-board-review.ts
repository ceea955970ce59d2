import type { BoardItem, FakeBoard } from './fake-board.js'

/**
 * The endpoints of the review loop and the trust checks on the fake board, in the shapes
 * of the forges' documentation. GitHub: issue events (`labeled`), the collaborator
 * permission API, pulls (open), reviews, review comments, check runs and commit statuses
 * of a commit, an Actions job's log, a check run. GitLab: resource label events, members
 * (with inherited ones), a merge request's pipelines, a pipeline's jobs, a job's log.
 */
export type Send = (status: number, data: unknown, headers?: Record<string, string>) => void

const GITHUB = '/repos/acme/shop'
const GITLAB = `/api/v4/projects/${encodeURIComponent('acme/backend/api')}`
const at = '2026-11-01T09:00:00Z'
const githubUser = (login: string) => ({ login, id: login.length, node_id: `U_${login}`, type: 'User', site_admin: false })
const gitlabUser = (username: string) => ({ id: userId(username), username, name: username, state: 'active', web_url: `https://gitlab.example/${username}` })

/** GitLab user ids: stable per name. */
export function userId(username: string): number {
  return [...username].reduce((n, c) => n * 31 + c.charCodeAt(0), 7) % 1_000_000
}

/** Who put each label on an item: labeledBy, or `maintainer` (a writer) when not said. */
const labeler = (item: BoardItem, label: string) => item.labeledBy?.[label] ?? 'maintainer'

export function githubReviewRoute(board: FakeBoard, method: string, path: string, send: Send): boolean {
  if (method !== 'GET') return false
  const permission = new RegExp(`^${GITHUB}/collaborators/([^/]+)/permission$`).exec(path)
  if (permission) {
    const login = decodeURIComponent(permission[1] as string)
    const level = board.permissions[login] ?? 'read'
    send(200, { permission: level === 'maintain' ? 'write' : level, role_name: level, user: githubUser(login) })
    return true
  }
  const events = new RegExp(`^${GITHUB}/issues/(\\d+)/events$`).exec(path)
  if (events) {
    const item = board.github.find((i) => i.number === Number(events[1]))
    if (!item) return false
    send(
      200,
      item.labels.map((label, n) => ({
        id: item.number * 100 + n,
        node_id: `LE_${n}`,
        event: 'labeled',
        actor: githubUser(labeler(item, label)),
        label: { name: label, color: 'ededed' },
        created_at: at,
      })),
    )
    return true
  }
  if (path === `${GITHUB}/pulls`) {
    send(
      200,
      board.github.filter((i) => i.kind === 'pull_request' && i.open).map((i) => pullOf(board, i)),
    )
    return true
  }
  const sub = new RegExp(`^${GITHUB}/pulls/(\\d+)/(reviews|comments)$`).exec(path)
  if (sub) {
    const item = board.github.find((i) => i.number === Number(sub[1]) && i.kind === 'pull_request')
    if (!item) return false
    if (sub[2] === 'reviews')
      send(
        200,
        (item.reviews ?? []).map((r) => ({
          id: r.id,
          node_id: `R_${r.id}`,
          user: githubUser(r.author),
          body: r.body,
          state: r.state,
          author_association: r.association,
          submitted_at: at,
          commit_id: item.sha ?? 'abc',
        })),
      )
    else
      send(
        200,
        (item.reviewComments ?? []).map((c) => ({
          id: c.id,
          node_id: `RC_${c.id}`,
          user: githubUser(c.author),
          body: c.body,
          path: c.path,
          line: c.line,
          original_line: c.line,
          author_association: c.association,
          created_at: at,
          updated_at: at,
        })),
      )
    return true
  }
  const commit = new RegExp(`^${GITHUB}/commits/([^/]+)/(check-runs|statuses)$`).exec(path)
  if (commit) {
    const sha = commit[1] as string
    if (commit[2] === 'check-runs') {
      const runs = (board.checks[sha] ?? []).map((c) => ({
        id: c.id,
        head_sha: sha,
        name: c.name,
        status: 'completed',
        conclusion: c.conclusion,
        started_at: at,
        completed_at: at,
        output: { title: c.title, summary: c.summary, text: null, annotations_count: 0 },
      }))
      send(200, { total_count: runs.length, check_runs: runs })
    } else {
      send(
        200,
        (board.statuses[sha] ?? []).map((s) => ({
          id: s.id,
          node_id: `S_${s.id}`,
          state: s.state,
          context: s.context,
          description: s.description,
          target_url: null,
          created_at: at,
          updated_at: at,
        })),
      )
    }
    return true
  }
  const log = new RegExp(`^${GITHUB}/actions/jobs/(\\d+)/logs$`).exec(path)
  if (log) {
    const text = board.logs[Number(log[1])]
    if (text === undefined) send(404, { message: 'Not Found', documentation_url: 'https://docs.github.com/rest' })
    else send(200, text, { 'content-type': 'text/plain' })
    return true
  }
  return false
}

export function pullOf(_board: FakeBoard, i: BoardItem) {
  return {
    id: 5000 + i.number,
    node_id: `PR_${i.number}`,
    number: i.number,
    title: i.title,
    body: i.body ?? `Body of ${i.number}`,
    state: i.open ? 'open' : 'closed',
    user: githubUser(i.author ?? 'bob'),
    labels: i.labels.map((name) => ({ id: name.length, node_id: `L_${name}`, name, color: 'ededed', default: false })),
    head: { ref: i.branch ?? `fix-${i.number}`, sha: i.sha ?? 'abc' },
    base: { ref: 'main', sha: 'def' },
    html_url: `https://github.example/acme/shop/pull/${i.number}`,
  }
}

export function gitlabReviewRoute(board: FakeBoard, method: string, path: string, send: Send): boolean {
  if (method !== 'GET' || !path.startsWith(`${GITLAB}/`)) return false
  const member = new RegExp(`^${GITLAB}/members/all/(\\d+)$`).exec(path)
  if (member) {
    const name = Object.keys(board.gitlabAccess).find((u) => userId(u) === Number(member[1]))
    if (name === undefined) send(404, { message: '404 Not found' })
    else send(200, { ...gitlabUser(name), access_level: board.gitlabAccess[name] })
    return true
  }
  const events = new RegExp(`^${GITLAB}/(issues|merge_requests)/(\\d+)/resource_label_events$`).exec(path)
  if (events) {
    const item = board.gitlab.find((i) => i.number === Number(events[2]) && i.kind === (events[1] === 'issues' ? 'issue' : 'merge_request'))
    if (!item) return false
    send(
      200,
      item.labels.map((label, n) => ({
        id: item.number * 100 + n,
        user: gitlabUser(labeler(item, label)),
        created_at: at,
        resource_type: 'Issue',
        resource_id: item.number,
        label: { id: n, name: label, color: '#ededed' },
        action: 'add',
      })),
    )
    return true
  }
  const pipelines = new RegExp(`^${GITLAB}/merge_requests/(\\d+)/pipelines$`).exec(path)
  if (pipelines) {
    send(
      200,
      (board.pipelines[Number(pipelines[1])] ?? []).map((p) => ({
        id: p.id,
        iid: p.id,
        project_id: 3,
        sha: p.sha,
        ref: 'fix',
        status: p.status,
        updated_at: at,
        web_url: `https://gitlab.example/acme/backend/api/-/pipelines/${p.id}`,
      })),
    )
    return true
  }
  const jobs = new RegExp(`^${GITLAB}/pipelines/(\\d+)/jobs$`).exec(path)
  if (jobs) {
    send(
      200,
      (board.pipelineJobs[Number(jobs[1])] ?? []).map((j) => ({ id: j.id, name: j.name, stage: j.stage, status: 'failed' })),
    )
    return true
  }
  const trace = new RegExp(`^${GITLAB}/jobs/(\\d+)/trace$`).exec(path)
  if (trace) {
    send(200, board.logs[Number(trace[1])] ?? '', { 'content-type': 'text/plain' })
    return true
  }
  return false
}
