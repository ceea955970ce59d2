import { describe, expect, it } from 'vitest'
import type { RecordedRequest } from '../helpers/fake-llm.js'
import { exitOf } from '../helpers/wait.js'
import { readTask, runSetup, waitFor } from './harness.js'
import type { RunSetup } from './harness.js'

const CHAT = 'chat:\n  wait_interval_seconds: 5\n  soft_timeout_minutes: 10\nlocks:\n  heartbeat_seconds: 0.5\n  stale_after_seconds: 2\n'

/** "re: <text>" to every message, except "loop", for which the model keeps calling tools. */
function model(s: RunSetup): void {
  let n = 0
  s.fake.fallback = (req: RecordedRequest) => {
    if (!Array.isArray(req.body.tools)) return { content: '## Original Task\nchat' }
    const last = [...req.body.messages].reverse().find((m) => m.role === 'user')?.content ?? ''
    if (last === 'loop') return { calls: [{ name: 'glob', arguments: { pattern: `*${n++}*` } }] }
    return { content: `re: ${last}` }
  }
}

async function startChat(s: RunSetup, extra: string[] = []) {
  const started = s.start(['run', '--chat', '--workspace', s.ws, ...extra])
  const uuid = await waitFor('the chat task', () => s.tree.layout.list('running')[0])
  await waitFor('the session to be waiting', () => readTask(s.tree, uuid).state.session)
  return { started, uuid }
}

describe('chat budgets', () => {
  it('max_turns is per message: a message that uses them all is answered with a note, and the session goes on', async () => {
    const s = await runSetup(`${CHAT}run:\n  max_turns: 3\n`)
    model(s)
    const { started, uuid } = await startChat(s)
    const loop = await s.run(['chat', uuid, '--send', 'loop'])
    expect(loop.code, loop.stderr).toBe(0)
    expect(loop.stdout).toMatch(/this message used its whole budget of turns \(run.max_turns per chat message\)/)
    for (const text of ['two', 'three', 'four']) expect((await s.run(['chat', uuid, '--send', text])).stdout.trim()).toBe(`re: ${text}`)
    // The answer reaches the sender before the turn that made it is counted in state.json.
    await waitFor('six turns counted', () => readTask(s.tree, uuid).state.turns === 6)
    expect(readTask(s.tree, uuid).state).toMatchObject({ status: 'processing', turns: 6 })
    started.child.kill('SIGTERM')
    expect((await exitOf(started.child)).code).toBe(143)
  })

  it('a session-wide budget (--max-tokens) ends the session as timeout, answering every waiting message with a note', async () => {
    const s = await runSetup(CHAT)
    model(s)
    // 120 tokens a request: the second answer spends the budget.
    const { started, uuid } = await startChat(s, ['--max-tokens', '200'])
    // Stopped while the messages arrive, so that all of them wait in the inbox at once.
    process.kill(started.child.pid as number, 'SIGSTOP')
    const sends = ['a', 'b', 'c', 'd'].map((t) => s.run(['chat', uuid, '--send', t]))
    await waitFor('four messages in the inbox', () => readTask(s.tree, uuid).inbox.filter((r) => r.kind === 'message' && r.visible !== false).length === 4)
    process.kill(started.child.pid as number, 'SIGCONT')
    const replies = (await Promise.all(sends)).map((r) => r.stdout.trim())
    expect((await exitOf(started.child)).code).toBe(5)
    const sent = readTask(s.tree, uuid)
      .inbox.filter((r) => r.kind === 'message' && r.visible !== false)
      .map((r) => String(r.content))
    const byText = Object.fromEntries(sent.map((t) => [t, replies[['a', 'b', 'c', 'd'].indexOf(t)]]))
    expect(byText[sent[0] as string]).toBe(`re: ${sent[0]}`)
    expect(byText[sent[1] as string]).toBe(`re: ${sent[1]}`)
    for (const t of sent.slice(2))
      expect(byText[t]).toMatch(/^\[ctxagent: not answered: the session ended because its budget ran out \(max_tokens budget: 240 of 200 tokens used\)\.\]$/)
    expect(readTask(s.tree, uuid)).toMatchObject({ location: 'completed', state: { status: 'timeout' } })
  })
})
