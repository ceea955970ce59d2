import { existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, expect, it, onTestFinished } from 'vitest'
import { alive, exitOf } from '../helpers/wait.js'
import { agentRequests, onlyTask, runSetup, waitFor } from './harness.js'
import { reachableRoot } from '../helpers/reachable.js'

// A real MCP server (the SDK's server classes over stdio) that misbehaves as told.
const HOSTILE = join(reachableRoot(), 'test', 'helpers', 'hostile-mcp.mjs')

async function hostile(mode: string, n: string, extra = '', timeout = 20) {
  const s = await runSetup()
  writeFileSync(
    s.config,
    s.fake.configYaml(
      `mcp:\n  servers:\n    bad:\n      command: ${process.execPath}\n      args: [${JSON.stringify(HOSTILE)}, ${mode}, ${JSON.stringify(n)}]\n      timeout_seconds: ${timeout}\n${extra}`,
    ),
  )
  return s
}

const toolNames = (s: Awaited<ReturnType<typeof hostile>>) =>
  (agentRequests(s.fake)[0]?.body.tools as { function: { name: string } }[]).map((t) => t.function.name)

describe('a hostile MCP server is bounded', () => {
  it('a tools/list that always returns another page: listing stops at mcp.max_tools, the rest named once', async () => {
    const s = await hostile('endless', '50', '  max_tools: 20\n')
    s.fake.queue.push({ content: 'done' })
    const res = await s.run(['run', '--task', 't', '--workspace', s.ws])
    expect(res.code, res.stderr).toBe(0)
    expect(toolNames(s).filter((n) => n.startsWith('bad__'))).toHaveLength(20)
    expect(res.stderr.match(/kept \(mcp.max_tools\); left out: /g)).toHaveLength(1)
    expect(res.stderr).toMatch(/left out: bad__p1_t\d+, and whatever else bad offers past its first 21/)
    expect(res.stderr).toMatch(/MCP: 20 tool\(s\) from 1 server\(s\)/)
  })

  it('endless empty pages stop after 100 pages', async () => {
    const s = await hostile('endless', '0')
    s.fake.queue.push({ content: 'done' })
    const res = await s.run(['run', '--task', 't', '--workspace', s.ws])
    expect(res.code, res.stderr).toBe(0)
    expect(res.stderr).toMatch(/MCP server bad listed its tools over more than 100 pages; the rest are left out/)
    expect(res.stderr).toMatch(/MCP: 0 tool\(s\) from 1 server\(s\)/)
  })

  it('many tools at once: the default keeps 128', async () => {
    const s = await hostile('many', '20000')
    s.fake.queue.push({ content: 'done' })
    const res = await s.run(['run', '--task', 't', '--workspace', s.ws])
    expect(res.code, res.stderr).toBe(0)
    expect(toolNames(s).filter((n) => n.startsWith('bad__'))).toHaveLength(128)
    expect(res.stderr).toMatch(/MCP: 129\+ tools offered, 128 kept/)
  })

  it('SIGINT while a server never answers tools/list: the task pauses at once and the server is closed', async () => {
    const marker = join(tmpdir(), `ctxagent-hang-${process.pid}-${Date.now()}`)
    onTestFinished(() => rmSync(marker, { force: true }))
    // Unsandboxed: it writes its host pid to a file outside any workspace (a sandboxed server has its own /tmp and pids).
    const s = await hostile('hang', marker, '      sandbox: none\n', 600)
    const started = s.start(['run', '--task', 't', '--workspace', s.ws])
    const pid = Number(await waitFor('tools/list to arrive', () => (existsSync(marker) ? readFileSync(marker, 'utf8') : undefined)))
    started.child.kill('SIGINT')
    const exit = await exitOf(started.child)
    expect(exit.code, started.err()).toBe(130)
    expect(onlyTask(s.tree)).toMatchObject({ location: 'paused' })
    expect(s.fake.requests).toHaveLength(0)
    await waitFor('the server to be closed', () => !alive(pid), 10_000)
  })

  it('a result over mcp.max_result_chars is cut with a note', async () => {
    const s = await hostile('big', '50000', '  max_result_chars: 1000\n')
    s.fake.queue.push({ calls: [{ name: 'bad__big', arguments: {} }] }, { content: 'done' })
    const res = await s.run(['run', '--task', 't', '--workspace', s.ws])
    expect(res.code, res.stderr).toBe(0)
    expect(res.stderr).toMatch(/the result of bad__big is 50,000 characters; the model gets the first 1,000 \(mcp.max_result_chars\)/)
    const result = String(onlyTask(s.tree).tools[0]?.result)
    expect(result.startsWith('x'.repeat(1000) + '\n[cut: the MCP result was 50,000 characters; only the first 1,000 are kept (mcp.max_result_chars)]')).toBe(
      true,
    )
  })

  it('cuts a long description and leaves out a tool whose schema would fill every request', async () => {
    const s = await hostile('huge', '0')
    s.fake.queue.push({ content: 'done' })
    const res = await s.run(['run', '--task', 't', '--workspace', s.ws])
    expect(res.code, res.stderr).toBe(0)
    const tools = agentRequests(s.fake)[0]?.body.tools as { function: { name: string; description: string } }[]
    expect(tools.filter((t) => t.function.name.startsWith('bad__')).map((t) => t.function.name)).toEqual(['bad__fine', 'bad__wordy'])
    expect(tools.find((t) => t.function.name === 'bad__wordy')?.function.description).toHaveLength(2000)
    expect(res.stderr).toMatch(/left out 1 tool\(s\) whose input schema is over 20,000 characters .*: bad__wide/)
  })

  it('counts the tools it added, not the ones it listed', async () => {
    const s = await hostile('dup', '0')
    s.fake.queue.push({ content: 'done' })
    const res = await s.run(['run', '--task', 't', '--workspace', s.ws])
    expect(res.code, res.stderr).toBe(0)
    expect(res.stderr).toMatch(/two tools are named bad__a; the second is left out/)
    expect(res.stderr).toMatch(/MCP: 2 tool\(s\) from 1 server\(s\)/)
  })
})
