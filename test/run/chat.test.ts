import { spawn } from 'node:child_process'
import { join } from 'node:path'
import { describe, expect, it, onTestFinished } from 'vitest'
import type { RecordedRequest } from '../helpers/fake-llm.js'
import { BIN, helper, findingsText, TEST_ENV, ROOT } from '../helpers/run.js'
import { exitOf, lineFrom } from '../helpers/wait.js'
import { agentRequests, expectContinuousSeq, jsonl, readTask, runSetup, waitFor } from './harness.js'
import type { RunSetup } from './harness.js'

const CHAT = 'chat:\n  wait_interval_seconds: 5\n  soft_timeout_minutes: 10\nlocks:\n  heartbeat_seconds: 0.5\n  stale_after_seconds: 2\n'

/** The fake model answers every chat message with "re: <its text>". */
function echo(s: RunSetup): void {
  s.fake.fallback = (req: RecordedRequest) => {
    const users = req.body.messages.filter((m) => m.role === 'user')
    return Array.isArray(req.body.tools) ? { content: `re: ${users.at(-1)?.content ?? ''}` } : { content: '## Original Task\nchat' }
  }
}

async function startChat(s: RunSetup, extra: string[] = []) {
  const started = s.start(['run', '--chat', '--workspace', s.ws, ...extra])
  const uuid = await waitFor('the chat task', () => s.tree.layout.list('running')[0])
  await waitFor('the session to be waiting', () => readTask(s.tree, uuid).state.session)
  return { started, uuid }
}

describe('chat sessions', () => {
  it('answers three messages in a row, in order, each once; the hidden start message never reaches the LLM', async () => {
    const s = await runSetup(CHAT)
    echo(s)
    const { started, uuid } = await startChat(s)
    for (const text of ['one', 'two', 'three']) {
      const res = await s.run(['chat', uuid.slice(0, 8), '--send', text])
      expect(res.code, res.stderr).toBe(0)
      expect(res.stdout.trim()).toBe(`re: ${text}`)
    }
    const task = readTask(s.tree, uuid)
    const users = task.messages.filter((m) => m.role === 'user')
    expect(users.map((m) => [m.content, m.visible ?? true])).toEqual([
      [expect.stringContaining('[chat session started'), false],
      ['one', true],
      ['two', true],
      ['three', true],
    ])
    const inboxIds = task.inbox.filter((r) => r.kind === 'message').map((r) => r.id)
    expect(users.map((m) => m.inbox_id)).toEqual(inboxIds)
    expect(task.messages.filter((m) => m.role === 'assistant').map((m) => m.content)).toEqual(['re: one', 're: two', 're: three'])
    expectContinuousSeq(task.messages)
    for (const r of s.fake.requests) expect(JSON.stringify(r.body.messages)).not.toContain('chat session started')
    expect(task.state).toMatchObject({ status: 'processing', session: { state: 'active' } })
    expect(task.metadata).toMatchObject({ task_type: 'local_chat', run: { chat: true } })
    started.child.kill('SIGTERM')
    expect((await exitOf(started.child)).code).toBe(143)
  })

  it('answers every message of two concurrent senders exactly once', async () => {
    const s = await runSetup(CHAT)
    echo(s)
    const { started, uuid } = await startChat(s)
    const texts = ['alpha', 'beta', 'gamma', 'delta']
    const replies = await Promise.all(texts.map((t) => s.run(['chat', uuid, '--send', t])))
    expect(replies.map((r) => r.stdout.trim())).toEqual(texts.map((t) => `re: ${t}`))
    const task = readTask(s.tree, uuid)
    for (const t of texts) expect(task.messages.filter((m) => m.role === 'user' && m.content === t)).toHaveLength(1)
    expect(agentRequests(s.fake)).toHaveLength(4)
    started.child.kill('SIGTERM')
    await exitOf(started.child)
  })

  it('--end while waiting: active → terminating → ended, the task completes and the agent exits 0; --end again succeeds', async () => {
    const s = await runSetup(CHAT)
    echo(s)
    const { started, uuid } = await startChat(s, ['--task', 'hello'])
    await waitFor('the first answer', () => readTask(s.tree, uuid).messages.some((m) => m.role === 'assistant'))
    const ended = await s.run(['chat', uuid, '--end'])
    expect(ended.code, ended.stderr).toBe(0)
    expect(ended.stdout).toMatch(/session ended/)
    expect((await exitOf(started.child)).code).toBe(0)
    const task = readTask(s.tree, uuid)
    expect(task.location).toBe('completed')
    expect(task.state).toMatchObject({ status: 'completed', session: { state: 'ended' }, final_answer: 're: hello' })
    expect(started.err()).toMatch(/chat: end requested/)
    // It says how to reach the session: this process reads nothing typed into its terminal.
    expect(started.err()).toContain(`talk to it with \`ctxagent chat ${uuid.slice(0, 8)}\``)
    expect(task.inbox.filter((r) => r.kind === 'reply')).toMatchObject([{ action: 'end', ok: true }])
    const again = await s.run(['chat', uuid, '--end'])
    expect(again.code).toBe(0)
    expect(again.stdout).toMatch(/no session to end/)
    const send = await s.run(['chat', uuid, '--send', 'anyone?'])
    expect(send.code).toBe(4)
  })

  it('ends an idle session after the soft timeout', async () => {
    const s = await runSetup('chat:\n  wait_interval_seconds: 0.2\n  soft_timeout_minutes: 0.03\n')
    echo(s)
    const { started, uuid } = await startChat(s)
    expect((await exitOf(started.child)).code).toBe(0)
    expect(readTask(s.tree, uuid).state).toMatchObject({ status: 'completed', session: { state: 'ended' } })
    expect(started.err()).toMatch(/idle for/)
  })

  it('pause while waiting, messages sent while paused are answered after the resume, in order', async () => {
    const s = await runSetup(CHAT)
    echo(s)
    const { started, uuid } = await startChat(s)
    expect((await s.run(['chat', uuid, '--send', 'before'])).stdout.trim()).toBe('re: before')
    expect((await s.run(['pause', uuid])).code).toBe(0)
    expect((await exitOf(started.child)).code).toBe(0)
    const refused = await s.run(['chat', uuid, '--send', 'waiting?'])
    expect(refused.code).toBe(4)
    for (const t of ['queued 1', 'queued 2']) expect((await s.run(['chat', uuid, '--send', t, '--no-wait'])).code).toBe(0)
    const resumed = s.start(['run', '--resume', uuid])
    await waitFor('both queued answered', () => readTask(s.tree, uuid).messages.filter((m) => m.role === 'assistant').length === 3)
    const task = readTask(s.tree, uuid)
    expect(task.messages.filter((m) => m.role === 'assistant').map((m) => m.content)).toEqual(['re: before', 're: queued 1', 're: queued 2'])
    expect(task.messages.filter((m) => m.role === 'user' && m.visible !== false).map((m) => m.content)).toEqual(['before', 'queued 1', 'queued 2'])
    resumed.child.kill('SIGTERM')
    await exitOf(resumed.child)
  })

  it('an agent killed with SIGKILL while waiting is reaped; no inbox message is lost, and a resume answers what it had not', async () => {
    const s = await runSetup(CHAT)
    echo(s)
    const { started, uuid } = await startChat(s)
    expect((await s.run(['chat', uuid, '--send', 'first'])).code).toBe(0)
    started.child.kill('SIGKILL')
    await exitOf(started.child)
    expect((await s.run(['chat', uuid, '--send', 'while dead', '--no-wait'])).code).toBe(0)
    const dir = s.tree.layout.taskDir('running', uuid)
    const inbox = jsonl(join(dir, 'inbox.jsonl'))
    expect(inbox.filter((r) => r.kind === 'message').map((r) => r.content)).toEqual([expect.stringContaining('chat session started'), 'first', 'while dead'])
    // Resumed before a reaper gets it (on this host its dead pid is proof enough): the message sent while it was dead is answered.
    const resumed = s.start(['run', '--resume', uuid])
    await waitFor('the late answer', () => readTask(s.tree, uuid).messages.some((m) => m.content === 're: while dead')).catch((err: Error) => {
      throw new Error(`${err.message}; the resumed agent said: ${resumed.err()}`)
    })
    resumed.child.kill('SIGKILL')
    await exitOf(resumed.child)
    // Past stale_after by the monitor's clock (CTXAGENT_NOW), with no waiting.
    const reaped = await s.run(['watch-locks', '--once'], { CTXAGENT_NOW: new Date(Date.now() + 10_000).toISOString() })
    expect(reaped.code, reaped.stderr).toBe(0)
    const task = readTask(s.tree, uuid)
    // recovery: resume (the default): paused to be resumed.
    expect(task.location).toBe('paused')
    expect(task.state).toMatchObject({ status: 'paused', paused_by: 'reaper' })
    expect(task.inbox.filter((r) => r.kind === 'message')).toHaveLength(3)
    expect(task.messages.filter((m) => m.role === 'user' && m.content === 'while dead')).toHaveLength(1)
  })

  it('watch-locks enforces the hard timeout: an end request first, SIGTERM to an owner that ignores it after the grace period', async () => {
    const s = await runSetup('chat:\n  hard_timeout_minutes: 1\n  end_grace_seconds: 1\n')
    const owner = helper('owner.mjs', [s.tree.base, 'chat-idle', '0.2'])
    const uuid = (await lineFrom(owner, /^[0-9a-f-]{36}$/)).trim()
    // The monitor's clock is the test's (CTXAGENT_NOW): the grace period passes when the test says, not when a busy machine lets it.
    const t0 = Date.now()
    const at = (ms: number) => ({ CTXAGENT_NOW: new Date(t0 + ms).toISOString() })
    const first = await s.run(['watch-locks', '--once', '--json'], at(0))
    expect(first.code, first.stderr).toBe(0)
    expect(JSON.parse(findingsText(first.stdout).trim())).toMatchObject({ uuid, action: 'end_requested' })
    expect(jsonl(join(s.tree.layout.taskDir('running', uuid), 'inbox.jsonl'))).toMatchObject([
      { kind: 'message', visible: false },
      { kind: 'control', action: 'end', sender: 'watch-locks' },
    ])
    // Within the grace period nothing more happens.
    expect(findingsText((await s.run(['watch-locks', '--once', '--json'], at(900))).stdout).trim()).toBe('')
    const second = await s.run(['watch-locks', '--once', '--json'], at(1_100))
    expect(JSON.parse(findingsText(second.stdout).trim())).toMatchObject({ uuid, action: 'terminated', pid: owner.pid })
    expect((await exitOf(owner)).signal).toBe('SIGTERM')
  })

  it('an attached line over 1 MiB is refused in one warning (nothing queued) and the session goes on to answer the next line', async () => {
    const s = await runSetup(CHAT)
    echo(s)
    const { started, uuid } = await startChat(s)
    const child = spawn(process.execPath, [BIN, 'chat', uuid, '--home', s.tree.base, '--config', s.config], {
      cwd: ROOT,
      env: { ...process.env, NO_COLOR: '1', CTXAGENT_HOME: '', CTXAGENT_CONFIG: '' },
      stdio: ['pipe', 'pipe', 'pipe'],
    })
    let out = ''
    let err = ''
    child.stdout.on('data', (d: Buffer) => (out += d.toString()))
    child.stderr.on('data', (d: Buffer) => (err += d.toString()))
    child.stdin.end(`${'x'.repeat(1_100_000)}\nhello\n`)
    expect((await exitOf(child)).code, err).toBe(0)
    expect(err).toMatch(/^ctxagent: warning: the message is [\d,]+ bytes as an inbox line; .* nothing was queued/)
    expect(out).toContain('re: hello')
    const task = readTask(s.tree, uuid)
    expect(task.inbox.filter((r) => r.kind === 'message' && r.visible !== false).map((r) => r.content)).toEqual(['hello'])
    started.child.kill('SIGTERM')
    await exitOf(started.child)
  })

  it('refuses a task that is not a chat task (exit 4) and an unknown one (exit 3)', async () => {
    const s = await runSetup()
    s.fake.queue.push({ content: 'done' })
    expect((await s.run(['run', '--task', 't', '--workspace', s.ws])).code).toBe(0)
    const uuid = s.tree.layout.list('completed')[0] as string
    const res = await s.run(['chat', uuid, '--send', 'hi'])
    expect(res.code).toBe(4)
    expect(res.stderr).toMatch(/is not a chat task/)
    expect((await s.run(['chat', '00000000-0000-4000-8000-000000000000', '--send', 'hi'])).code).toBe(3)
  })
})

describe('run --chat on a terminal', () => {
  it('is the chat itself: a typed line gets its answer printed, Ctrl-D ends the session (exit 0)', async () => {
    const s = await runSetup(CHAT)
    echo(s)
    // script(1) gives ctxagent a real terminal; what the test writes is what a person types.
    const command = [process.execPath, BIN, 'run', '--chat', '--workspace', s.ws, '--home', s.tree.base, '--config', s.config].map((a) => `'${a}'`).join(' ')
    const child = spawn('script', ['-qfec', command, '/dev/null'], { env: { ...process.env, ...TEST_ENV, TERM: 'dumb' }, stdio: ['pipe', 'pipe', 'pipe'] })
    let out = ''
    child.stdout.on('data', (d: Buffer) => (out += d.toString()))
    onTestFinished(() => {
      if (child.exitCode === null) child.kill('SIGKILL')
    })
    await waitFor('the prompt', () => out.includes('type a message'))
    child.stdin.write('hello there\r')
    await waitFor('the answer', () => out.includes('agent> re: hello there'))
    child.stdin.write('\x04')
    expect((await exitOf(child)).code).toBe(0)
    const uuid = s.tree.layout.list('completed')[0] as string
    expect(readTask(s.tree, uuid).state).toMatchObject({ status: 'completed', session: { state: 'ended' } })
  })
})
