import { readdirSync, writeFileSync } from 'node:fs'
import { describe, expect, it } from 'vitest'
import { startFakeGitlab } from '../helpers/fake-gitlab.js'
import type { FakeGitlab } from '../helpers/fake-gitlab.js'
import { exitOf } from '../helpers/wait.js'
import { agentRequests, onlyTask, runSetup, waitFor } from './harness.js'
import type { RunSetup } from './harness.js'

const MARKER = /<!-- ctxagent:[0-9a-f-]{36} -->/

async function setup(gl: FakeGitlab): Promise<RunSetup> {
  const s = await runSetup()
  writeFileSync(
    s.config,
    s.fake.configYaml(`gitlab:\n  url: ${gl.url}\n  token: ${gl.token}\n  bot_name: ctxagent-bot\ncomments:\n  min_interval_seconds: 0.01\n`),
  )
  return s
}

describe('GitLab tasks', () => {
  it('composes an issue from its notes (system notes left out), posts a marked status note and the outcome', async () => {
    const gl = await startFakeGitlab()
    gl.addNote('bob', 'Reproduced on staging.')
    gl.addNote('alice', 'changed the description', true)
    const s = await setup(gl)
    s.fake.queue.push({ content: 'The offset was computed from the page number twice; fixed.' })
    const res = await s.run(['run', '--gitlab', 'acme/backend/api#7', '--workspace', s.ws])
    expect(res.code, res.stderr).toBe(0)
    const first = agentRequests(s.fake)[0]?.body.messages[1]?.content ?? ''
    expect(first).toContain('# Issue acme/backend/api#7: Pagination of /orders skips a page')
    expect(first).toContain('Opened by @alice; labels: bug, api')
    expect(first).toContain('### @bob (')
    expect(first).not.toContain('changed the description')
    expect(onlyTask(s.tree).metadata).toMatchObject({
      task_key: { task_source: 'gitlab', owner: 'acme', repo: 'backend/api', task_type: 'issue', task_id: '7' },
      task_type: 'gitlab_issue',
      repository: 'acme/backend/api',
    })
    const posted = gl.requests.filter((r) => r.method === 'POST').map((r) => String((r.body as { body: string }).body))
    expect(posted).toHaveLength(2)
    for (const body of posted) expect(body).toMatch(MARKER)
    expect(posted[1]).toMatch(/completed after 1 turn\(s\)\.\n\nThe offset was computed/)
  })

  it('composes a merge request with its unresolved threads; a note added while it runs reaches the next request once', async () => {
    const gl = await startFakeGitlab({ mr: true })
    gl.discussions.push(
      {
        id: 'd1',
        individual_note: false,
        notes: [
          {
            id: 1,
            type: 'DiffNote',
            body: 'Use the cursor here',
            author: { username: 'carol' },
            resolvable: true,
            resolved: false,
            system: false,
            position: { new_path: 'app/orders.rb', new_line: 40 },
          },
        ],
      },
      {
        id: 'd2',
        individual_note: false,
        notes: [{ id: 2, type: 'DiffNote', body: 'done already', author: { username: 'carol' }, resolvable: true, resolved: true, system: false }],
      },
    )
    const s = await setup(gl)
    let n = 0
    s.fake.fallback = () => ({ delayMs: 150, calls: [{ name: 'glob', arguments: { pattern: `*${n++}*` } }] })
    const started = s.start(['run', '--gitlab', 'acme/backend/api!12', '--workspace', s.ws, '--max-turns', '30'])
    await waitFor('the status note', () => gl.notes.some((x) => MARKER.test(String(x.body))))
    const first = (await waitFor('the first request', () => agentRequests(s.fake)[0]))?.body.messages[1]?.content ?? ''
    expect(first).toContain('# Merge request acme/backend/api!12: Fix the pagination of /orders')
    expect(first).toContain('Branch fix-pagination into main')
    expect(first).toContain('## Unresolved threads\n### app/orders.rb:40\n@carol:\n> Use the cursor here')
    expect(first).not.toContain('done already')
    gl.addNote('dave', 'Also check per_page=100.')
    gl.addNote('dave', 'assigned to @erin', true)
    await waitFor('the note in a request', () => agentRequests(s.fake).find((r) => JSON.stringify(r.body.messages).includes('Also check per_page=100.')))
    started.child.kill('SIGTERM')
    await exitOf(started.child)
    const task = onlyTask(s.tree)
    expect(task.messages.filter((m) => m.content === '[New Comment from @dave]:\n> Also check per_page=100.')).toHaveLength(1)
    expect(task.messages.some((m) => String(m.content).includes('assigned to @erin'))).toBe(false)
    expect(task.metadata).toMatchObject({ task_type: 'gitlab_merge_request' })
  })

  it('1,500 notes across a pause and a resume: no old note comes back as new (a high-water mark, not the capped id list)', async () => {
    const gl = await startFakeGitlab()
    for (let i = 1; i <= 1500; i++) gl.addNote('bob', `old note ${i}.`)
    const s = await setup(gl)
    writeFileSync(
      s.config,
      s.fake
        .configYaml(`gitlab:\n  url: ${gl.url}\n  token: ${gl.token}\n  bot_name: ctxagent-bot\ncomments:\n  min_interval_seconds: 0.01\n`)
        .replace('context_length: 8000', 'context_length: 500000'),
    )
    let n = 0
    s.fake.fallback = () => ({ delayMs: 50, calls: [{ name: 'glob', arguments: { pattern: `*${n++}*` } }] })
    const first = s.start(['run', '--gitlab', 'acme/backend/api#7', '--workspace', s.ws])
    await waitFor('a first turn', () => agentRequests(s.fake).length >= 2)
    gl.addNote('carol', 'fresh before the pause')
    await waitFor('the fresh note in a request', () =>
      agentRequests(s.fake).some((r) => JSON.stringify(r.body.messages.slice(2)).includes('fresh before the pause')),
    )
    const uuid = onlyTask(s.tree).uuid
    expect((await s.run(['pause', uuid])).code).toBe(0)
    expect((await exitOf(first.child)).code).toBe(0)
    expect(onlyTask(s.tree).state.comment_detection).toMatchObject({ last_comment_id: expect.any(Number) })
    const resumed = s.start(['run', '--resume', uuid])
    const before = agentRequests(s.fake).length
    await waitFor('turns after the resume', () => agentRequests(s.fake).length >= before + 3)
    gl.addNote('dave', 'fresh after the resume')
    await waitFor('the second note in a request', () => agentRequests(s.fake).some((r) => JSON.stringify(r.body.messages).includes('fresh after the resume')))
    expect((await s.run(['pause', uuid])).code).toBe(0)
    expect((await exitOf(resumed.child)).code).toBe(0)
    const task = onlyTask(s.tree)
    const later = task.messages.slice(2).map((m) => String(m.content))
    expect(later.filter((c) => c.includes('old note'))).toEqual([])
    expect(later.filter((c) => c.includes('fresh before the pause'))).toHaveLength(1)
    expect(later.filter((c) => c.includes('fresh after the resume'))).toHaveLength(1)
  })

  it('a missing token is one line, exit 2, before anything is written', async () => {
    const gl = await startFakeGitlab()
    const s = await runSetup()
    writeFileSync(s.config, s.fake.configYaml(`gitlab:\n  url: ${gl.url}\n`))
    const res = await s.run(['run', '--gitlab', 'acme/backend/api#7', '--workspace', s.ws], { GITLAB_TOKEN: '' })
    expect(res.code).toBe(2)
    expect(res.stderr).toMatch(/^ctxagent: no GitLab token is set/)
    const bad = await s.run(['run', '--gitlab', 'acme#7', '--workspace', s.ws])
    expect(bad.code).toBe(2)
    for (const l of ['running', 'paused', 'completed'] as const) expect(readdirSync(s.tree.layout.dir(l))).toEqual([])
  })
})
