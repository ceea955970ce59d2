import Database from 'better-sqlite3'
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it, onTestFinished } from 'vitest'
import { cliAsync } from '../helpers/run.js'
import { exitOf } from '../helpers/wait.js'
import { readTask, runSetup, waitFor } from './harness.js'
import type { RunSetup } from './harness.js'

const runningUuid = (s: RunSetup) => s.tree.layout.list('running')[0] ?? null

// What a new operator met in the first hour (issue 19): each as a test of the built CLI.

describe('run: defaults that bite', () => {
  it('refuses a workspace that contains the task tree, or lies inside it, and writes nothing', async () => {
    const s = await runSetup()
    const inside = join(s.ws, 'logs', 'contexts')
    const contains = await cliAsync(['run', '--task', 't', '--workspace', s.ws, '--home', inside, '--config', s.config])
    expect(contains.code).toBe(2)
    expect(contains.stderr).toMatch(
      /^ctxagent: the workspace .+ contains the task tree .+logs\/contexts; the agent could read or delete its own task files \(keep the task tree outside the workspace/,
    )
    mkdirSync(join(s.tree.base, 'ws'))
    const within = await cliAsync(['run', '--task', 't', '--workspace', join(s.tree.base, 'ws'), '--home', s.tree.base, '--config', s.config])
    expect(within.code).toBe(2)
    expect(within.stderr).toMatch(/is inside the task tree/)
    expect(s.fake.requests).toHaveLength(0)
  })

  it('sends the request to OPENAI_BASE_URL when the config names no base_url', async () => {
    const s = await runSetup()
    s.fake.queue.push({ calls: [{ name: 'finish', arguments: { summary: 'done', status: 'done' } }] })
    const res = await cliAsync(['run', '--task', 't', '--workspace', s.ws, '--home', s.tree.base, '--config', 'none', '--no-inherit'], {
      OPENAI_BASE_URL: s.fake.url,
      OPENAI_API_KEY: 'k',
    })
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

describe('run: pause and recovery', () => {
  it('answers and drops pause requests left from an earlier run: a resume is not paused by them', async () => {
    const s = await runSetup()
    s.fake.queue.push({ delayMs: 60_000, content: 'never' })
    const started = s.start(['run', '--task', 't', '--workspace', s.ws])
    const uuid = await waitFor('the task', () => runningUuid(s))
    await waitFor('the request', () => s.fake.requests.length >= 1)
    // Two pause requests that time out: the agent is stopped (SIGSTOP), then it dies
    // without ever reading them (a pause reaches a live agent within a second).
    started.child.kill('SIGSTOP')
    for (let i = 0; i < 2; i++) expect((await s.run(['pause', uuid, '--wait', '1s'])).code).toBe(1)
    started.child.kill('SIGKILL')
    await exitOf(started.child)
    s.fake.queue.push({ calls: [{ name: 'finish', arguments: { summary: 'done', status: 'done' } }] })
    const resumed = await s.run(['run', '--resume', uuid, '--log-format', 'text'])
    expect(resumed.code, resumed.stderr).toBe(0)
    expect(resumed.stdout).toMatch(/completed/)
    expect(resumed.stderr).toMatch(/dropped a pause request by .+ made for an earlier run/)
  })

  it('unlock takes a task whose agent was SIGKILLed on this host at once, its heartbeat still fresh', async () => {
    const s = await runSetup()
    s.fake.queue.push({ delayMs: 60_000, content: 'never' })
    const started = s.start(['run', '--task', 't', '--workspace', s.ws])
    const uuid = await waitFor('the task', () => runningUuid(s))
    await waitFor('the request', () => s.fake.requests.length >= 1)
    started.child.kill('SIGKILL')
    await exitOf(started.child)
    const res = await s.run(['unlock', uuid])
    expect(res.code, res.stderr).toBe(0)
    expect(res.stdout).toContain(`its agent exited (pid ${started.child.pid} is gone)`)
    // fleet.recovery's default (resume) pauses it to be resumed (docs/running.md#recovery-on-one-host).
    expect(s.tree.layout.list('running')).toEqual([])
    expect(readTask(s.tree, uuid)).toMatchObject({ location: 'paused', state: { status: 'paused', paused_by: 'reaper' } })
  })

  it('continues a task stopped by a budget when the budget is raised, and says so truthfully', async () => {
    const s = await runSetup()
    const read = { calls: [{ name: 'read_file', arguments: { path: 'calc.js' } }] }
    s.fake.queue.push(read, { calls: [{ name: 'read_file', arguments: { path: 'README.md' } }] })
    const first = await s.run(['run', '--task', 't', '--workspace', s.ws, '--max-turns', '2', '--log-format', 'text'])
    expect(first.code).toBe(5)
    const uuid = s.tree.layout.list('completed')[0] as string
    expect(first.stderr).toContain(`continue it with a raised budget: ctxagent run --resume ${uuid.slice(0, 8)} --max-turns N`)
    const same = await s.run(['run', '--resume', uuid])
    expect(same.code).toBe(2)
    expect(same.stderr).toMatch(/has used its max_turns budget \(2 of 2 turns\) \(raise it to continue: ctxagent run --resume \w{8} --max-turns \d+\)/)
    s.fake.queue.push({ calls: [{ name: 'finish', arguments: { summary: 'done', status: 'done' } }] })
    const more = await s.run(['run', '--resume', uuid, '--max-turns', '5', '--json'])
    expect(more.code, more.stderr).toBe(0)
    expect(JSON.parse(more.stdout)).toMatchObject({ uuid, status: 'completed', turns: 3 })
    expect(s.tree.layout.list('completed')).toEqual([uuid])
  })
})

describe('run: what the logs say about a tool call', () => {
  it("names read_file's path and run_command's command, and a failing command's exit status (logs and view)", async () => {
    const s = await runSetup()
    s.fake.queue.push(
      { calls: [{ name: 'read_file', arguments: { path: 'calc.js' } }] },
      { calls: [{ name: 'run_command', arguments: { command: 'exit 3' } }] },
      { calls: [{ name: 'finish', arguments: { summary: 'done', status: 'done' } }] },
    )
    const res = await s.run(['run', '--task', 't', '--workspace', s.ws, '--allow-shell', '--log-format', 'text'])
    expect(res.code, res.stderr).toBe(0)
    expect(res.stderr).toMatch(/read_file calc\.js success \(\d+ ms\)/)
    expect(res.stderr).toMatch(/run_command `exit 3` exited 3 \(\d+ ms\)/)
    const uuid = s.tree.layout.list('completed')[0] as string
    const view = await s.run(['view', uuid, '--messages', '--all'])
    expect(view.stdout).toContain('→ read_file(calc.js)')
    expect(view.stdout).toContain('→ run_command(exit 3)')
  })
})

describe('run: the audit log', () => {
  it('has the line of a run killed with SIGKILL: it is written at start', async () => {
    const s = await runSetup()
    s.fake.queue.push({ delayMs: 60_000, content: 'never' })
    const started = s.start(['run', '--task', 't', '--workspace', s.ws])
    const uuid = await waitFor('the task', () => runningUuid(s))
    await waitFor('the request', () => s.fake.requests.length >= 1)
    started.child.kill('SIGKILL')
    await exitOf(started.child)
    const audit = readFileSync(join(s.tree.base, 'audit.jsonl'), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as Record<string, unknown>)
    expect(audit).toEqual([expect.objectContaining({ command: 'run', uuid, event: 'start' })])
  })
})

describe('tokens split and cost', () => {
  it('records prompt, completion and cached tokens per turn and per task, shown in view and stats with a cost from config pricing', async () => {
    const s = await runSetup('pricing:\n  fake-model: { prompt: 2, completion: 10, cached: 1 }\n')
    s.fake.queue.push(
      {
        calls: [{ name: 'read_file', arguments: { path: 'calc.js' } }],
        usage: { prompt_tokens: 1000, completion_tokens: 50, total_tokens: 1050, prompt_tokens_details: { cached_tokens: 400 } },
      },
      {
        calls: [{ name: 'finish', arguments: { summary: 'done', status: 'done' } }],
        usage: { prompt_tokens: 1200, completion_tokens: 30, total_tokens: 1230 },
      },
    )
    const res = await s.run(['run', '--task', 't', '--workspace', s.ws, '--no-inherit'])
    expect(res.code, res.stderr).toBe(0)
    const uuid = s.tree.layout.list('completed')[0] as string
    const task = readTask(s.tree, uuid)
    expect(task.state).toMatchObject({ total_tokens_used: 2280, prompt_tokens: 2200, completion_tokens: 80, cached_tokens: 400 })
    expect(task.messages.filter((m) => m.role === 'assistant').map((m) => m.usage)).toEqual([
      { prompt_tokens: 1000, completion_tokens: 50, cached_tokens: 400 },
      { prompt_tokens: 1200, completion_tokens: 30 },
    ])
    // (1800 × 2 + 400 × 1 + 80 × 10) / 1e6 = $0.0048 for the turns, + (100 × 2 + 20 × 10) / 1e6 for the final summary: $0.0052 billed.
    const view = await s.run(['view', uuid])
    expect(view.stdout).toContain('Total tokens: 2,280 (prompt 2,200, of which cached 400; completion 80)')
    expect(view.stdout).toContain('Cost: $0.0052 (config pricing; turns $0.0048, the summaries below included)')
    expect(view.stdout).toMatch(/Model: fake-model \(openai\)/)
    expect(view.stdout).toContain(`Workspace: ${s.ws}`)
    const json = JSON.parse((await s.run(['view', uuid, '--json'])).stdout) as { tokens: unknown }
    expect(json.tokens).toEqual({
      total: 2280,
      prompt: 2200,
      completion: 80,
      cached: 400,
      cost_usd: 0.0052,
      turns_cost_usd: 0.0048,
      final_summary: { requests: 1, prompt: 100, completion: 20, cached: 0, cost_usd: 0.0004 },
    })
    const stats = JSON.parse((await s.run(['stats', '--json'])).stdout) as { tokens: unknown }
    const split = { total: 2280, prompt: 2200, completion: 80, cached: 400, cache_write: 0, unsplit: 0, cost_usd: 0.0052, unpriced_tasks: 0 }
    expect(stats.tokens).toEqual(split)
    expect((await s.run(['stats'])).stdout).toContain('Tokens: 2,280 (prompt 2,200, of which cached 400; completion 80) · $0.0052')
    // The split is the index's (stats reads no state.json for it) ...
    const statePath = join(s.tree.layout.taskDir('completed', uuid), 'state.json')
    const state = readFileSync(statePath)
    writeFileSync(statePath, '{"status": "completed", "total_tokens_used": 2280}')
    const fromIndex = JSON.parse((await s.run(['stats', '--json'])).stdout) as { tokens: unknown }
    // (The summaries' tokens are state.json's alone: a state.json without them bills the turns.)
    expect(fromIndex.tokens).toEqual({ ...split, cost_usd: 0.0048 })
    // ... but a row indexed before the split had columns is split from its state.json.
    writeFileSync(statePath, state)
    const db = new Database(s.tree.layout.db)
    db.prepare('UPDATE tasks SET prompt_tokens = NULL, completion_tokens = NULL, cached_tokens = NULL').run()
    db.close()
    const fromState = JSON.parse((await s.run(['stats', '--json'])).stdout) as { tokens: unknown }
    expect(fromState.tokens).toEqual(split)
  })
})

describe('list and last', () => {
  it('lists tasks newest first with filters, text search and --json, and takes last wherever a uuid goes', async () => {
    const s = await runSetup()
    const done = (summary: string) => ({ calls: [{ name: 'finish', arguments: { summary, status: 'done' } }] })
    s.fake.queue.push(done('fixed the CSV export'))
    expect(
      (await s.run(['run', '--task', 'The CSV export drops the last row\nmore detail', '--workspace', s.ws, '--no-inherit'], { CTXAGENT_NOW: '' })).code,
    ).toBe(0)
    s.fake.queue.push({ delayMs: 60_000, content: 'never' })
    const started = s.start(['run', '--task', 'Rename the invoice module', '--workspace', s.ws, '--no-inherit'])
    const second = await waitFor('the second task', () => runningUuid(s))
    await waitFor('its request', () => s.fake.requests.length >= 3)
    started.child.kill('SIGTERM')
    await exitOf(started.child)
    const first = s.tree.layout.list('completed')[0] as string

    const text = await s.run(['list'])
    expect(text.code, text.stderr).toBe(0)
    const lines = text.stdout.split('\n')
    const at = (uuid: string) => lines.findIndex((l) => l.includes(uuid.slice(0, 8)))
    expect(at(second)).toBeGreaterThan(-1)
    expect(at(second)).toBeLessThan(at(first))
    expect(text.stdout).toContain('The CSV export drops the last row')
    expect(text.stdout).not.toContain('more detail')
    expect(text.stdout).toContain('fake-model')

    const rows = (await s.run(['ls', '--json'])).stdout
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as Record<string, unknown>)
    expect(rows.map((r) => [r.uuid, r.status])).toEqual([
      [second, 'paused'],
      [first, 'completed'],
    ])
    expect(rows[1]).toMatchObject({
      user: expect.any(String),
      model: 'fake-model',
      provider: 'openai',
      workspace: s.ws,
      turns: 1,
      task: 'The CSV export drops the last row',
      final_answer: 'fixed the CSV export',
    })
    const found = (args: string[]) =>
      s.run(['list', '--json', ...args]).then((r) =>
        r.stdout
          .trim()
          .split('\n')
          .filter(Boolean)
          .map((l) => (JSON.parse(l) as { uuid: string }).uuid),
      )
    expect(await found(['--search', 'csv EXPORT'])).toEqual([first])
    expect(await found(['--search', 'fixed the csv'])).toEqual([first])
    expect(await found(['--status', 'paused'])).toEqual([second])
    expect(await found(['--limit', '1'])).toEqual([second])
    expect(await found(['--user', 'nobody-here'])).toEqual([])

    // last: the newest task, for view and run --resume.
    const view = await s.run(['view', 'last', '--json'])
    expect((JSON.parse(view.stdout) as { uuid: string }).uuid).toBe(second)
    s.fake.queue.push(done('renamed'))
    const resumed = await s.run(['run', '--resume', 'last', '--json'])
    expect(resumed.code, resumed.stderr).toBe(0)
    expect(JSON.parse(resumed.stdout)).toMatchObject({ uuid: second, status: 'completed' })
  })

  it('says there is no task for last in an empty tree (exit 3), and no tree for list (exit 3)', async () => {
    const s = await runSetup()
    const res = await s.run(['view', 'last'])
    expect(res.code).toBe(3)
    expect(res.stderr).toMatch(/^ctxagent: there is no task in /)
    expect((await cliAsync(['list', '--home', join(s.ws, 'nope')])).code).toBe(3)
  })
})

describe('export', () => {
  it('prints a readable Markdown transcript: the task, each call with its arguments, results, the outcome', async () => {
    const s = await runSetup()
    s.fake.queue.push(
      { content: 'Let me look.', calls: [{ name: 'read_file', arguments: { path: 'calc.js' } }] },
      { calls: [{ name: 'finish', arguments: { summary: 'add() subtracts', status: 'done' } }] },
    )
    expect((await s.run(['run', '--task', 'Why is add wrong?', '--workspace', s.ws, '--no-inherit'])).code).toBe(0)
    const res = await s.run(['export', 'last', '--format', 'markdown'])
    expect(res.code, res.stderr).toBe(0)
    const uuid = s.tree.layout.list('completed')[0] as string
    expect(res.stdout).toMatch(new RegExp(`^# ctxagent task ${uuid}\n`))
    expect(res.stdout).toContain('| model | fake-model (openai) |')
    expect(res.stdout).toContain('## [2] user\n\nWhy is add wrong?')
    expect(res.stdout).toContain('→ **read_file**\n```json\n{\n  "path": "calc.js"\n}\n```')
    expect(res.stdout).toMatch(/## \[4\] tool · read_file\n\n```\n1: export function add/)
    expect(res.stdout).toContain('## Outcome\n\nadd() subtracts')
    expect((await s.run(['export', 'last', '--format', 'pdf'])).code).toBe(2)
    // The bill: the token split, and the cost once the model has a price.
    expect(res.stdout).toMatch(/\| prompt, cached, completion \| [\d,]+, [\d,]+, [\d,]+ \|/)
    expect(res.stdout).not.toContain('| cost (turns) |')
    const priced = join(s.ws, '..', `${s.ws.split('/').pop()}-priced.yaml`)
    writeFileSync(priced, s.fake.configYaml('pricing:\n  fake-model: {prompt: 3, completion: 15, cached: 0.3}\n'))
    onTestFinished(() => rmSync(priced, { force: true }))
    const billed = await cliAsync(['export', 'last', '--home', s.tree.base, '--config', priced])
    expect(billed.code, billed.stderr).toBe(0)
    expect(billed.stdout).toMatch(/\| cost \(turns\) \| \$\d+\.\d{4} \|/)
    // --json is refused (exit 2) with where JSON is to be had, not ignored.
    const json = await s.run(['export', 'last', '--json'])
    expect(json.code).toBe(2)
    expect(json.stderr).toMatch(/^ctxagent: export writes a Markdown transcript, not JSON \(for JSON use view <uuid> --json/)
  })

  it('nests the final summary and the outcome under their own headings', async () => {
    const { nested } = await import('../../src/commands/export.js')
    expect(nested('## Original Task\nfix it\n## Current State\n- done')).toBe('### Original Task\nfix it\n### Current State\n- done')
    expect(nested('# A\n## B')).toBe('### A\n#### B')
    expect(nested('plain text\n```\n# not a heading\n```')).toBe('plain text\n```\n# not a heading\n```')
    expect(nested('#### already deep')).toBe('#### already deep')
  })
})
