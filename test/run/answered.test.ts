import { readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { exitOf } from '../helpers/wait.js'
import { agentRequests, onlyTask, readTask, runSetup, waitFor } from './harness.js'
import type { RunSetup } from './harness.js'

const LATER = { CTXAGENT_NOW: '2099-01-01T00:00:00Z' }

/** A task whose agent answered, then was SIGKILLed while the LLM wrote its final summary. */
async function killedAfterAnswer(s: RunSetup, answer: string): Promise<string> {
  s.fake.queue.push({ content: answer }, { delayMs: 60_000, content: 'never' })
  const started = s.start(['run', '--task', 't', '--workspace', s.ws])
  await waitFor('the final summary request', () => s.fake.requests.length >= 2)
  started.child.kill('SIGKILL')
  await exitOf(started.child)
  const uuid = s.tree.layout.list('running')[0] as string
  expect(readTask(s.tree, uuid).state).toMatchObject({ status: 'processing', final_answer: answer })
  return uuid
}

describe('a task killed after answering finishes its ending', () => {
  it('--resume completes it with that answer, without another turn', async () => {
    const s = await runSetup()
    const uuid = await killedAfterAnswer(s, 'the answer')
    const before = agentRequests(s.fake).length
    const res = await s.run(['run', '--resume', uuid, '--json'], LATER)
    expect(res.code, res.stderr).toBe(0)
    expect(res.stderr).toMatch(/had already answered when its agent stopped; finishing its ending/)
    expect(agentRequests(s.fake)).toHaveLength(before)
    expect(JSON.parse(res.stdout)).toMatchObject({ status: 'completed', final_answer: 'the answer' })
    const task = readTask(s.tree, uuid)
    expect(task).toMatchObject({ location: 'completed', state: { status: 'completed', final_answer: 'the answer' } })
    expect(task.messages.filter((m) => m.role === 'assistant')).toHaveLength(1)
  })

  it('watch-locks completes it instead of failing it', async () => {
    const s = await runSetup()
    const uuid = await killedAfterAnswer(s, 'the answer')
    const dry = await s.run(['cleanup', '--dry-run', '--json'], LATER)
    expect(dry.code, dry.stderr).toBe(0)
    expect(dry.stdout).toContain('the agent died after answering')
    expect(dry.stdout).toContain('would complete it with its answer')
    const res = await s.run(['watch-locks', '--once', '--json'], LATER)
    expect(res.code, res.stderr).toBe(0)
    expect(JSON.parse(res.stdout.trim().split('\n')[0] as string)).toMatchObject({
      uuid,
      action: 'finished',
      reason: expect.stringContaining('died after answering'),
    })
    expect(readTask(s.tree, uuid)).toMatchObject({ location: 'completed', state: { status: 'completed', final_answer: 'the answer', error: null } })
  })
})

describe('the final answer is bounded in state.json', () => {
  it('an answer over run.max_answer_chars is cut there with a note; messages.jsonl keeps the whole', async () => {
    const s = await runSetup('run:\n  max_answer_chars: 1000\n')
    s.fake.queue.push({ content: 'a'.repeat(5000) })
    const res = await s.run(['run', '--task', 't', '--workspace', s.ws])
    expect(res.code, res.stderr).toBe(0)
    const task = onlyTask(s.tree)
    expect(task.state.final_answer).toBe(
      `${'a'.repeat(1000)}\n[cut: the final answer is 5,000 characters; the first 1,000 are kept here, the whole is in messages.jsonl]`,
    )
    expect(task.messages.find((m) => m.role === 'assistant')?.content).toBe('a'.repeat(5000))
    expect(res.stderr).toMatch(/state.json keeps the first 1,000 \(run.max_answer_chars\)/)
  })

  it('a state.json over 16 MB (an older version wrote one) is still read: view, reap and index cope, and its rewrite is small', async () => {
    const s = await runSetup()
    const uuid = await killedAfterAnswer(s, 'short')
    const path = join(s.tree.layout.taskDir('running', uuid), 'state.json')
    const state = JSON.parse(readFileSync(path, 'utf8')) as Record<string, unknown>
    writeFileSync(path, JSON.stringify({ ...state, final_answer: 'b'.repeat(20 * 1024 * 1024) }))
    const view = await s.run(['view', uuid])
    expect(view.code, view.stderr).toBe(0)
    const reaped = await s.run(['watch-locks', '--once', '--json'], LATER)
    expect(reaped.code, reaped.stderr).toBe(0)
    const task = readTask(s.tree, uuid)
    expect(task).toMatchObject({ location: 'completed', state: { status: 'completed' } })
    expect(String(task.state.final_answer)).toMatch(/^b{1000000}\n\[cut: the final answer is 20,971,520 characters;/)
    const reindex = await s.run(['reindex'])
    expect(reindex.code, reindex.stderr).toBe(0)
  })
})

describe('a task killed between its finish call and state.json taking the answer', () => {
  /** A task that called finish, SIGKILLed during its final summary, its state.json set back to before the answer (and, with `unrun`, the finish call's result taken out). */
  async function killedAfterFinish(s: RunSetup, calls: { name: string; arguments: Record<string, unknown> }[], unrun: boolean): Promise<string> {
    s.fake.queue.push({ calls }, { delayMs: 60_000, content: 'never' })
    const started = s.start(['run', '--task', 't', '--workspace', s.ws])
    await waitFor('the final summary request', () => s.fake.requests.length >= 2)
    started.child.kill('SIGKILL')
    await exitOf(started.child)
    const uuid = s.tree.layout.list('running')[0] as string
    const dir = s.tree.layout.taskDir('running', uuid)
    const state = JSON.parse(readFileSync(join(dir, 'state.json'), 'utf8')) as Record<string, unknown>
    delete state.final_answer
    delete state.finish_status
    writeFileSync(join(dir, 'state.json'), JSON.stringify(state))
    if (unrun) {
      for (const name of ['messages.jsonl', 'current.jsonl']) {
        const lines = readFileSync(join(dir, name), 'utf8')
          .split('\n')
          .filter((l) => l !== '' && !l.includes('"role":"tool"'))
        writeFileSync(join(dir, name), `${lines.join('\n')}\n`)
      }
      writeFileSync(join(dir, 'tools.jsonl'), '')
    }
    return uuid
  }

  for (const unrun of [false, true]) {
    it(`a resume settles with the recorded finish (${unrun ? 'not yet run: it is run once' : 'already answered'}), asking the model nothing`, async () => {
      const s = await runSetup()
      const uuid = await killedAfterFinish(s, [{ name: 'finish', arguments: { summary: 'all fixed', status: 'blocked' } }], unrun)
      const before = agentRequests(s.fake).length
      const res = await s.run(['run', '--resume', uuid, '--json'], LATER)
      expect(res.code, res.stderr).toBe(0)
      expect(agentRequests(s.fake)).toHaveLength(before)
      expect(JSON.parse(res.stdout)).toMatchObject({ status: 'completed', final_answer: 'all fixed', finish_status: 'blocked' })
      const task = readTask(s.tree, uuid)
      expect(task).toMatchObject({ location: 'completed', state: { status: 'completed', final_answer: 'all fixed', finish_status: 'blocked' } })
      expect(task.tools.filter((t) => t.tool_name === 'finish')).toMatchObject([{ status: 'success', result: 'task finished (blocked)' }])
      expect(task.messages.filter((m) => m.role === 'tool')).toHaveLength(1)
    })
  }

  it('a finish after a call the crash cut short is not run: both are answered as aborted and the model is asked again', async () => {
    const s = await runSetup()
    const uuid = await killedAfterFinish(
      s,
      [
        { name: 'glob', arguments: { pattern: '*' } },
        { name: 'finish', arguments: { summary: 'all fixed' } },
      ],
      true,
    )
    const before = agentRequests(s.fake).length
    s.fake.queue.push({ content: 'done after all' })
    const res = await s.run(['run', '--resume', uuid, '--json'], LATER)
    expect(res.code, res.stderr).toBe(0)
    expect(res.stderr).toMatch(/2 unanswered tool call\(s\) answered as aborted/)
    expect(agentRequests(s.fake)).toHaveLength(before + 1)
    expect(JSON.parse(res.stdout)).toMatchObject({ status: 'completed', final_answer: 'done after all' })
  })
})
