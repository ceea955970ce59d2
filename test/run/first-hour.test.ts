import { mkdirSync, rmSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { cliAsync } from '../helpers/run.js'
import { exitOf } from '../helpers/wait.js'
import { runSetup, waitFor } from './harness.js'
import type { RunSetup } from './harness.js'

const runningUuid = (s: RunSetup) => s.tree.layout.list('running')[0] ?? null

// What a new operator met in the first hour (issue 19): each as a test of the built CLI.

describe('run: defaults that bite', () => {
  it('refuses a workspace that contains the task tree, or lies inside it, and writes nothing', async () => {
    const s = await runSetup()
    const inside = join(s.ws, 'logs', 'contexts')
    const contains = await cliAsync(['run', '--task', 't', '--workspace', s.ws, '--home', inside, '--config', s.config])
    expect(contains.code).toBe(2)
    expect(contains.stderr).toMatch(/^ctxagent: the workspace .+ contains the task tree .+logs\/contexts; the agent could read or delete its own task files \(keep the task tree outside the workspace/)
    mkdirSync(join(s.tree.base, 'ws'))
    const within = await cliAsync(['run', '--task', 't', '--workspace', join(s.tree.base, 'ws'), '--home', s.tree.base, '--config', s.config])
    expect(within.code).toBe(2)
    expect(within.stderr).toMatch(/is inside the task tree/)
    expect(s.fake.requests).toHaveLength(0)
  })

  it('sends the request to OPENAI_BASE_URL when the config names no base_url', async () => {
    const s = await runSetup()
    s.fake.queue.push({ calls: [{ name: 'finish', arguments: { summary: 'done', status: 'done' } }] })
    const res = await cliAsync(['run', '--task', 't', '--workspace', s.ws, '--home', s.tree.base, '--config', 'none', '--no-inherit'], { OPENAI_BASE_URL: s.fake.url, OPENAI_API_KEY: 'k' })
    expect(res.code, res.stderr).toBe(0)
    expect(s.fake.requests.length).toBeGreaterThanOrEqual(1)
  })

  it('says that a task whose directory vanished is gone, not that another process took it over', async () => {
    const s = await runSetup('locks:\n  heartbeat_seconds: 1\n  stale_after_seconds: 3\n')
    s.fake.queue.push({ delayMs: 60_000, content: 'never' })
    const started = s.start(['run', '--task', 't', '--workspace', s.ws, '--log-format', 'text'])
    const uuid = await waitFor('the task', () => runningUuid(s))
    await waitFor('the request', () => s.fake.requests.length >= 1)
    rmSync(s.tree.layout.taskDir('running', uuid), { recursive: true, force: true })
    const exit = await exitOf(started.child)
    expect(exit.code).toBe(1)
    expect(started.err()).toMatch(/task directory .+ vanished/)
    expect(started.err()).not.toMatch(/took the task over/)
  })
})

describe('run: JSON log mode', () => {
  it('writes only JSON lines on stderr, the last one too, when stopped by SIGTERM', async () => {
    const s = await runSetup()
    s.fake.queue.push({ delayMs: 60_000, content: 'never' })
    const started = s.start(['run', '--task', 't', '--workspace', s.ws, '--log-format', 'json'])
    const uuid = await waitFor('the task', () => runningUuid(s))
    await waitFor('the request', () => s.fake.requests.length >= 1)
    started.child.kill('SIGTERM')
    expect((await exitOf(started.child)).code).toBe(143)
    const lines = started.err().trim().split('\n')
    for (const line of lines) expect(() => JSON.parse(line), line).not.toThrow()
    expect(JSON.parse(lines.at(-1) as string)).toMatchObject({ level: 'error', uuid, msg: expect.stringMatching(/paused/), exit_code: 143 })
  })
})
