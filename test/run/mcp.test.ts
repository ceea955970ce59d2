import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { mcpToolName } from '../../src/tools/mcp.js'
import { alive, exitOf } from '../helpers/wait.js'
import { agentRequests, onlyTask, runSetup, waitFor } from './harness.js'
import type { RunSetup } from './harness.js'
import { reachableRoot } from '../helpers/reachable.js'

// A real third-party MCP server from npm (a devDependency), run over stdio: no network.
const SERVER = join(reachableRoot(), 'node_modules', '@modelcontextprotocol', 'server-filesystem', 'dist', 'index.js')

const mcpYaml = (ws: string, extra = '') =>
  `mcp:\n  servers:\n    files:\n      command: ${process.execPath}\n      args: [${JSON.stringify(SERVER)}, ${JSON.stringify(ws)}]\n      env:\n        FILES_TOKEN: ghp_notreallyasecret0000000000000000000000\n      timeout_seconds: 20\n${extra}`

async function setupWithServer(extra = ''): Promise<RunSetup> {
  const s = await runSetup()
  const { writeFileSync } = await import('node:fs')
  writeFileSync(s.config, s.fake.configYaml(mcpYaml(s.ws, extra)))
  return s
}

describe('MCP servers as tools', () => {
  it('names tools <server>__<tool>, sanitised, at most 64 characters', () => {
    expect(mcpToolName('files', 'read_text_file')).toBe('files__read_text_file')
    expect(mcpToolName('my.server', 'do stuff/now')).toBe('my_server__do_stuff_now')
    expect(mcpToolName('s'.repeat(50), 't'.repeat(50))).toHaveLength(64)
  })

  it('offers the server tools, passes a result to the LLM, turns isError into an error result, and closes the server at the end', async () => {
    const s = await setupWithServer()
    s.fake.queue.push(
      { calls: [{ name: 'files__list_directory', arguments: { path: s.ws } }] },
      { calls: [{ name: 'files__read_text_file', arguments: { path: '/etc/passwd' } }] },
      { content: 'done' },
    )
    const res = await s.run(['run', '--task', 't', '--workspace', s.ws, '--log-format', 'json'])
    expect(res.code, res.stderr).toBe(0)
    const requests = agentRequests(s.fake)
    const names = (requests[0]?.body.tools as { function: { name: string } }[]).map((t) => t.function.name)
    expect(names).toEqual(expect.arrayContaining(['read_file', 'files__list_directory', 'files__read_text_file', 'files__directory_tree']))
    for (const name of names) expect(name).toMatch(/^[A-Za-z0-9_-]{1,64}$/)
    expect(JSON.stringify(requests[1]?.body.messages.at(-1))).toContain('calc.js')
    const task = onlyTask(s.tree)
    expect(task.tools.map((t) => [t.tool_name, t.status])).toEqual([
      ['files__list_directory', 'success'],
      ['files__read_text_file', 'error'],
    ])
    expect(String(task.tools[1]?.result)).toMatch(/^Error: .*(denied|outside|not allowed)/i)
    const started = res.stderr
      .split('\n')
      .map((l) => (l ? (JSON.parse(l) as { msg: string; mcp_pids?: Record<string, number> }) : null))
      .find((l) => l?.mcp_pids)
    const pid = started?.mcp_pids?.files as number
    expect(pid).toBeGreaterThan(0)
    await waitFor('the server to be closed', () => !alive(pid), 30_000)
  })

  it('restarts a server that died mid-task once; after a second death its tools answer with errors', async () => {
    const s = await setupWithServer()
    let n = 0
    s.fake.fallback = () => ({ delayMs: 100, calls: [{ name: 'files__list_directory', arguments: { path: s.ws, n: n++ } }] })
    const started = s.start(['run', '--task', 't', '--workspace', s.ws, '--log-format', 'json', '--max-turns', '40'])
    const pidOf = () => {
      for (const line of started.err().split('\n'))
        if (line.includes('mcp_pids')) return (JSON.parse(line) as { mcp_pids: Record<string, number> }).mcp_pids.files
      return undefined
    }
    const pid = await waitFor('the server pid', pidOf)
    await waitFor('a first call', () => s.fake.requests.length >= 2)
    process.kill(pid, 'SIGKILL')
    await waitFor('the restart', () => started.err().includes('MCP server files died'))
    // The restarted server answers; its pid is in the log. Kill it too.
    const second = Number(await waitFor('the new pid', () => /started again \(pid (\d+)\)/.exec(started.err())?.[1]))
    expect(second).not.toBe(pid)
    await waitFor('a call to the restarted server', () => onlyTask(s.tree).tools.filter((t) => t.status === 'success').length >= 2)
    process.kill(second, 'SIGKILL')
    await waitFor('the second death', () => started.err().includes('already restarted once'))
    started.child.kill('SIGTERM')
    await exitOf(started.child)
    const task = onlyTask(s.tree)
    const statuses = task.tools.map((t) => t.status)
    expect(statuses[0]).toBe('success')
    expect(task.tools.some((t, i) => i > 0 && t.status === 'success')).toBe(true)
    expect(String(task.tools.at(-1)?.result)).toMatch(/already restarted once/)
  })

  it('a server that fails to start is a warning naming it and its stderr; the task runs without its tools', async () => {
    const s = await runSetup()
    const { writeFileSync } = await import('node:fs')
    writeFileSync(
      s.config,
      s.fake.configYaml(
        `mcp:\n  servers:\n    broken:\n      command: ${process.execPath}\n      args: ["-e", "console.error('cannot open the database'); process.exit(3)"]\n      timeout_seconds: 5\n`,
      ),
    )
    s.fake.queue.push({ content: 'done' })
    const res = await s.run(['run', '--task', 't', '--workspace', s.ws, '--log-format', 'text'])
    expect(res.code, res.stderr).toBe(0)
    expect(res.stderr).toMatch(/warning: MCP server broken did not start \(.*its stderr said: cannot open the database\); the task runs without its tools/)
    const names = (agentRequests(s.fake)[0]?.body.tools as { function: { name: string } }[]).map((t) => t.function.name)
    expect(names.some((n) => n.startsWith('broken__'))).toBe(false)
  })

  it('ctxagent config shows the servers, never their environment values', async () => {
    const s = await setupWithServer()
    const res = await s.run(['config'])
    expect(res.code, res.stderr).toBe(0)
    expect(res.stdout).toContain('files:')
    expect(res.stdout).toMatch(/FILES_TOKEN: null # set \(hidden\)/)
    expect(res.stdout).not.toContain('ghp_notreally')
  })
})
