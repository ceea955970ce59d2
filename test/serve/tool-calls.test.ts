import { readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { uuidN } from '../fixtures/tree.js'
import { startPostgres } from '../helpers/postgres.js'
import type { PgServer } from '../helpers/postgres.js'
import { readTask, runSetup } from '../run/harness.js'
import type { RunSetup } from '../run/harness.js'
import { startServe } from './helpers.js'
import { parseExposition, total } from './exposition.js'
import { reachableRoot } from '../helpers/reachable.js'

const METRIC = 'ctxagent_tool_calls_by_tool_total'
// A real MCP server from npm (a devDependency), over stdio: its tools are counted under its server's name.
const SERVER = join(reachableRoot(), 'node_modules', '@modelcontextprotocol', 'server-filesystem', 'dist', 'index.js')
const BUILTIN = new Set(['read_file', 'list_dir', 'glob', 'grep', 'edit_file', 'write_file', 'inspect', 'finish', 'run_command'])

let server: PgServer
beforeAll(async () => {
  server = await startPostgres()
})
afterAll(async () => {
  await server?.stop()
})

/** What /metrics should say, from tools.jsonl: `tool\0outcome` → calls. */
function fromRecords(tools: Record<string, unknown>[], into = new Map<string, number>()): Map<string, number> {
  for (const t of tools) {
    const name = String(t.tool_name)
    const tool = BUILTIN.has(name) ? name : name.startsWith('files__') ? 'mcp:files' : 'other'
    const key = `${tool}\0${String(t.status)}`
    into.set(key, (into.get(key) ?? 0) + 1)
  }
  return into
}

describe.each([
  ['tasks.db', () => ({})],
  ['PostgreSQL', () => ({ CTXAGENT_DATABASE_URL: server.url })],
] as const)('/metrics tool calls by tool and outcome (%s)', (_name, envOf) => {
  it('counts the tools.jsonl records of real runs, and never falls: not after cleanup deletes the tasks, not after reindex', async () => {
    const env: Record<string, string> = envOf()
    const s: RunSetup = await runSetup()
    writeFileSync(
      s.config,
      s.fake.configYaml(
        `mcp:\n  servers:\n    files:\n      command: ${process.execPath}\n      args: [${JSON.stringify(SERVER)}, ${JSON.stringify(s.ws)}]\n      timeout_seconds: 20\n`,
      ),
    )
    const run = async (args: string[]) => {
      const res = await s.run(args, env)
      expect(res.code, res.stderr).toBe(0)
      return res
    }
    const scrape = async () => {
      const serve = await startServe(s.tree.base, { env, config: s.config })
      const res = await serve.get('/metrics')
      expect(res.status).toBe(200)
      const m = parseExposition(await res.text())
      await new Promise<void>((resolve) => {
        serve.child.once('exit', () => resolve())
        serve.child.kill('SIGTERM')
      })
      const out = new Map<string, number>()
      for (const sample of m.get(METRIC)?.samples ?? []) out.set(`${sample.labels.tool}\0${sample.labels.outcome}`, sample.value)
      return { samples: out, m }
    }

    s.fake.queue.push(
      {
        calls: [
          { name: 'read_file', arguments: { path: 'calc.js' } },
          { name: 'read_file', arguments: { path: 'missing.js' } },
        ],
      },
      // A name no tool has: the model's, so untrusted; counted as other, never as a series of its own.
      {
        calls: [
          { name: 'evil"}\nctxagent_x 1', arguments: {} },
          { name: 'files__list_directory', arguments: { path: s.ws } },
        ],
      },
      { calls: [{ name: 'files__read_text_file', arguments: { path: '/etc/passwd' } }] },
      { calls: [{ name: 'finish', arguments: { summary: 'looked', status: 'done' } }] },
    )
    await run(['run', '--task', 'look around', '--workspace', s.ws])
    s.fake.queue.push(
      { calls: [{ name: 'read_file', arguments: { path: 'calc.js' } }] },
      { calls: [{ name: 'edit_file', arguments: { path: 'calc.js', old_string: 'a - b', new_string: 'a + b' } }] },
      { calls: [{ name: 'edit_file', arguments: { path: 'calc.js', old_string: 'not there', new_string: 'x' } }] },
      { content: 'fixed' },
    )
    await run(['run', '--task', 'fix add', '--workspace', s.ws])

    const uuids = s.tree.layout.list('completed')
    expect(uuids).toHaveLength(2)
    const expected = new Map<string, number>()
    for (const uuid of uuids) fromRecords(readTask(s.tree, uuid).tools, expected)
    expect(Object.fromEntries(expected)).toEqual({
      'read_file\0success': 2,
      'read_file\0error': 1,
      'other\0error': 1,
      'mcp:files\0success': 1,
      'mcp:files\0error': 1,
      'finish\0success': 1,
      'edit_file\0success': 1,
      'edit_file\0error': 1,
    })

    // Written by the runs' own index writes (the triggers), before any reindex.
    const first = await scrape()
    expect(Object.fromEntries(first.samples)).toEqual(Object.fromEntries(expected))
    expect(total(first.m, METRIC)).toBe(total(first.m, 'ctxagent_tool_calls_total'))

    // A task from before tallies (its state.json has only tool_call_count): its calls are unknown.
    s.tree.write({ uuid: uuidN(9), tools: 4, createdAt: '2024-01-10T10:00:00.000Z', completedAt: '2024-01-10T12:00:00.000Z' })
    await run(['reindex'])
    expected.set('unknown\0unknown', 4)
    const second = await scrape()
    expect(Object.fromEntries(second.samples)).toEqual(Object.fromEntries(expected))

    await run(['cleanup', '--delete-after', '0'])
    expect(s.tree.layout.list('completed')).toEqual([])
    const third = await scrape()
    expect(total(third.m, 'ctxagent_tasks')).toBe(0)
    expect(Object.fromEntries(third.samples)).toEqual(Object.fromEntries(expected))

    await run(['reindex'])
    expect(Object.fromEntries((await scrape()).samples)).toEqual(Object.fromEntries(expected))
  })
})

describe('a tally across a resume', () => {
  it('catches up with the records a dead owner wrote after its last state write, and /metrics counts each record once', async () => {
    const s = await runSetup()
    s.fake.queue.push({ calls: [{ name: 'read_file', arguments: { path: 'calc.js' } }] }, { calls: [{ name: 'read_file', arguments: { path: 'missing.js' } }] })
    expect((await s.run(['run', '--task', 't', '--workspace', s.ws, '--max-turns', '2'])).code).toBe(5)
    const uuid = s.tree.layout.list('completed')[0] as string
    const path = join(readTask(s.tree, uuid).dir, 'state.json')
    const state = JSON.parse(readFileSync(path, 'utf8')) as Record<string, unknown>
    expect(state.tool_calls).toEqual({ read_file: { success: 1, error: 1 } })
    // As a crash between the second record and the state write after it leaves it.
    writeFileSync(path, JSON.stringify({ ...state, tool_call_count: 1, tool_calls: { read_file: { success: 1 } } }))
    s.fake.queue.push({ calls: [{ name: 'finish', arguments: { summary: 'done', status: 'done' } }] })
    const more = await s.run(['run', '--resume', uuid, '--max-turns', '5'])
    expect(more.code, more.stderr).toBe(0)
    const task = readTask(s.tree, uuid)
    expect(task.state).toMatchObject({ tool_call_count: 3, tool_calls: { read_file: { success: 1, error: 1 }, finish: { success: 1 } } })
    const serve = await startServe(s.tree.base, { config: s.config })
    const m = parseExposition(await (await serve.get('/metrics')).text())
    const samples = Object.fromEntries((m.get(METRIC)?.samples ?? []).map((x) => [`${x.labels.tool}\0${x.labels.outcome}`, x.value]))
    expect(samples).toEqual(Object.fromEntries(fromRecords(task.tools)))
  })
})
