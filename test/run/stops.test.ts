import { existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, expect, it, onTestFinished } from 'vitest'
import { exitOf } from '../helpers/wait.js'
import { agentRequests, expectWellFormed, readTask, runSetup, waitFor } from './harness.js'
import type { RunSetup } from './harness.js'
import { reachableRoot } from '../helpers/reachable.js'

const HOSTILE = join(reachableRoot(), 'test', 'helpers', 'hostile-mcp.mjs')

/** A config whose MCP server never answers tools/list; returns the file its pid will be written to. */
function hangingServer(s: RunSetup): string {
  const marker = join(tmpdir(), `ctxagent-hang-${process.pid}-${Math.random().toString(36).slice(2)}`)
  onTestFinished(() => rmSync(marker, { force: true }))
  // Unsandboxed: the hang server writes its host pid to a file in /tmp (a sandboxed one has its own /tmp and pids).
  writeFileSync(
    s.config,
    s.fake.configYaml(
      `mcp:\n  servers:\n    bad:\n      command: ${process.execPath}\n      args: [${JSON.stringify(HOSTILE)}, hang, ${JSON.stringify(marker)}]\n      timeout_seconds: 600\n      sandbox: none\n`,
    ),
  )
  return marker
}

/** A task that compacts after 3 tool rounds, whose summary request never answers; resolves once that request is out. */
async function summarising() {
  const s = await runSetup()
  writeFileSync(s.config, s.fake.configYaml('context:\n  compression:\n    max_rounds: 3\n').replace('context_length: 8000', 'context_length: 1000000'))
  let round = 0
  // Agent requests look around; the summary request never answers.
  s.fake.fallback = (req) =>
    Array.isArray(req.body.tools) ? { calls: [{ name: 'glob', arguments: { pattern: `*${round++}*` } }] } : { delayMs: 120_000, content: 'never' }
  const started = s.start(['run', '--task', 'look around', '--workspace', s.ws, '--log-format', 'json'])
  await waitFor('the summary request', () => s.fake.requests.some((r) => !Array.isArray(r.body.tools)))
  return { s, started }
}

describe('every wait takes the stop', () => {
  it('SIGINT while waiting out a 429 with Retry-After: 3600 pauses the task and ends the process (exit 130), not after the hour', async () => {
    const s = await runSetup()
    // The limit on a server's wait lifted to the hour, so that only a wait that listens to the stop ends before the test's timeout.
    writeFileSync(s.config, s.fake.configYaml().replace('llm:\n', 'llm:\n  max_retry_wait: 3600\n'))
    s.fake.fallback = () => ({ status: 429, content: 'slow down', headers: { 'retry-after': '3600' } })
    const started = s.start(['run', '--task', 't', '--workspace', s.ws])
    await waitFor('the 429 answered', () => s.fake.answered >= 1)
    const uuid = s.tree.layout.list('running')[0] as string
    started.child.kill('SIGINT')
    expect((await exitOf(started.child)).code).toBe(130)
    expect(readTask(s.tree, uuid)).toMatchObject({ location: 'paused', state: { status: 'paused', paused_by: 'signal' } })
    // The retry the server put off was never sent.
    expect(s.fake.requests).toHaveLength(1)
  })

  it('SIGTERM while the window is being summarised: the summary request is stopped and the task pauses (exit 143), never left in running/', async () => {
    const { s, started } = await summarising()
    const uuid = s.tree.layout.list('running')[0] as string
    // As under a worker that died: nobody reads its stderr any more.
    started.child.stderr?.destroy()
    started.child.kill('SIGTERM')
    expect((await exitOf(started.child)).code).toBe(143)
    expect(readTask(s.tree, uuid)).toMatchObject({ location: 'paused', state: { status: 'paused', paused_by: 'signal' } })
  })

  it('a stop that cuts a compaction short sends no request after it: the turn ends there and the task pauses (exit 143)', async () => {
    const { s, started } = await summarising()
    const asked = s.fake.requests.length
    // A request after the stop would hang too (a slow LLM): the pause would wait for it.
    s.fake.fallback = () => ({ delayMs: 120_000, content: 'never' })
    started.child.kill('SIGTERM')
    expect((await exitOf(started.child)).code).toBe(143)
    expect(s.fake.requests.length).toBe(asked)
    expect(started.err()).toMatch(/compression of task .* failed/)
  })

  it('ctxagent pause stops an LLM request in flight; the resumed task does not pause again on the same request', async () => {
    const s = await runSetup()
    s.fake.queue.push({ delayMs: 120_000, content: 'never' })
    const started = s.start(['run', '--task', 't', '--workspace', s.ws])
    await waitFor('the LLM request', () => s.fake.requests.length >= 1)
    const uuid = s.tree.layout.list('running')[0] as string
    const paused = await s.run(['pause', uuid, '--wait', '60s'])
    expect(paused.code, paused.stderr).toBe(0)
    expect((await exitOf(started.child)).code).toBe(0)
    expect(readTask(s.tree, uuid).location).toBe('paused')
    expect(started.err()).toMatch(/pause requested by .*; stopping what is in flight/)
    s.fake.queue.push({ content: 'done' })
    const resumed = await s.run(['run', '--resume', uuid])
    expect(resumed.code, resumed.stderr).toBe(0)
    expect(readTask(s.tree, uuid).state).toMatchObject({ status: 'completed', final_answer: 'done' })
    const replies = readTask(s.tree, uuid).inbox.filter((r) => r.kind === 'reply')
    expect(replies).toHaveLength(1)
    for (const r of agentRequests(s.fake)) expectWellFormed(r)
  })

  it('ctxagent pause and --timeout stop an MCP start-up that never ends', async () => {
    const s = await runSetup()
    const marker = hangingServer(s)
    const started = s.start(['run', '--task', 't', '--workspace', s.ws])
    await waitFor('tools/list to arrive', () => existsSync(marker) && readFileSync(marker, 'utf8'))
    const uuid = s.tree.layout.list('running')[0] as string
    const paused = await s.run(['pause', uuid, '--wait', '60s'])
    expect(paused.code, paused.stderr).toBe(0)
    expect((await exitOf(started.child)).code).toBe(0)
    expect(s.fake.requests).toHaveLength(0)

    const timed = await runSetup()
    hangingServer(timed)
    // The start-up never ends, so only the timeout ends this run. (On a loaded machine the 2 s can run out before
    // tools/list is sent — the server still starting — which is the same wait: no marker is asserted.)
    const res = await timed.run(['run', '--task', 't', '--workspace', timed.ws, '--timeout', '2s'])
    expect(res.code, res.stderr).toBe(5)
    expect(res.stderr).toMatch(/timeout budget: 2s of work reached/)
    expect(timed.fake.requests).toHaveLength(0)
  })

  it('SIGINT during the final summary ends that LLM request; the answered task completes with an extractive summary', async () => {
    const s = await runSetup()
    s.fake.queue.push({ content: 'the answer' }, { delayMs: 120_000, content: 'never' })
    const started = s.start(['run', '--task', 't', '--workspace', s.ws])
    await waitFor('the final summary request', () => s.fake.requests.length >= 2)
    const uuid = s.tree.layout.list('running')[0] as string
    started.child.kill('SIGINT')
    expect((await exitOf(started.child)).code).toBe(0)
    const task = readTask(s.tree, uuid)
    expect(task).toMatchObject({ location: 'completed', state: { status: 'completed', final_answer: 'the answer' } })
    expect(task.files).toContain('final_summary.txt')
    expect(started.err()).toMatch(/final summary by the LLM failed .*; writing an extractive one/)
  })
})
