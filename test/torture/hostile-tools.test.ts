import { spawn, spawnSync } from 'node:child_process'
import { existsSync, linkSync, mkdirSync, readdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it, onTestFinished } from 'vitest'
import { helper } from '../helpers/run.js'
import { exitOf } from '../helpers/wait.js'
import { runSetup } from '../run/harness.js'
import { setup } from '../tools/fixture.js'
import type { Fixture } from '../tools/fixture.js'
import { record } from './report.js'

/** Tries per file tool against the link swapper: small in `npm test`, 10,000 in `npm run torture`. */
const TRIES = Number(process.env.CTXAGENT_TORTURE_SWAPS ?? 300)

/**
 * A workspace where `d` flips, in another process, between a directory inside (its
 * `f` says INSIDE) and a link to the outside directory (its `f` says SECRET, beside
 * `outside-only.txt`). Any tool output naming SECRET or outside-only, or any change
 * outside, is a leak.
 */
async function swapping(): Promise<Fixture & { outsideFiles(): string[] }> {
  const s = setup()
  const out = join(s.root, 'outdir')
  mkdirSync(out)
  writeFileSync(join(out, 'f'), 'SECRET INSIDE\n')
  writeFileSync(join(out, 'outside-only.txt'), 'SECRET\n')
  mkdirSync(join(s.ws, 'realdir'))
  writeFileSync(join(s.ws, 'realdir', 'f'), 'INSIDE\n')
  symlinkSync(out, join(s.ws, 'link'))
  const child = helper('link-swapper.mjs', [s.ws])
  onTestFinished(() => void child.kill('SIGKILL'))
  await new Promise<void>((resolve) => child.stdout.once('data', () => resolve()))
  return { ...s, outsideFiles: () => readdirSync(out).sort() }
}

const leaked = (text: string) => text.includes('SECRET') || text.includes('outside-only')

describe('file tools against a concurrent link swapper', () => {
  it('read_file, grep, glob and list_dir never show outside content', { timeout: 1_800_000 }, async () => {
    const s = await swapping()
    const calls: [string, Record<string, unknown>][] = [
      ['read_file', { path: 'd/f' }],
      ['grep', { pattern: 'SECRE[T]|INSID[E]', path: 'd' }],
      ['grep', { pattern: 'SECRE[T]|INSID[E]' }],
      ['glob', { pattern: '**/*', path: 'd' }],
      ['list_dir', { path: 'd' }],
      ['list_dir', { path: '.', depth: 3 }],
    ]
    const leaks: Record<string, number> = {}
    let inside = 0
    for (const [name, args] of calls) {
      const key = `${name} ${JSON.stringify(args)}`
      let count = 0
      for (let i = 0; i < TRIES; i++) {
        const out = (await s.call(name, args)).output
        if (leaked(out)) count++
        if (out.includes('INSIDE')) inside++
      }
      leaks[key] = count
    }
    record('hostile-tools', { tries_per_read_tool: TRIES, outside_reads: Object.values(leaks).reduce((a, b) => a + b, 0), inside_reads: inside })
    expect(leaks).toEqual(Object.fromEntries(Object.keys(leaks).map((k) => [k, 0])))
    // The race was real: inside content was read through the flipping directory.
    expect(inside).toBeGreaterThan(0)
  })

  it('write_file and edit_file never write outside', { timeout: 1_800_000 }, async () => {
    const s = await swapping()
    const before = s.outsideFiles()
    let written = 0
    for (let i = 0; i < TRIES; i++) {
      if ((await s.call('write_file', { path: `d/new-${i}.txt`, content: 'planted\n' })).status === 'success') written++
      await s.call('read_file', { path: 'd/f' })
      await s.call('edit_file', { path: 'd/f', old_string: 'INSIDE', new_string: 'INSIDE+' })
    }
    record('hostile-tools', { tries_per_write_tool: TRIES, outside_writes: s.outsideFiles().length - before.length, inside_writes: written })
    expect(s.outsideFiles()).toEqual(before)
    expect(readFileSync(join(s.root, 'outdir', 'f'), 'utf8')).toBe('SECRET INSIDE\n')
    expect(written).toBeGreaterThan(0)
  })
})

describe('files that are not what they seem', () => {
  it('a hard link to an outside file is refused by every tool that reads', async () => {
    const s = setup()
    linkSync(join(s.outside, 'secret.txt'), join(s.ws, 'hard.txt'))
    expect((await s.call('read_file', { path: 'hard.txt' })).output).toMatch(/has 2 hard links; tools refuse it/)
    expect((await s.call('grep', { pattern: 'SECRET' })).output).toBe('no matches for /SECRET/')
    expect((await s.call('edit_file', { path: 'hard.txt', old_string: 'TOP', new_string: 'BOTTOM' })).status).toBe('error')
    s.outsideUntouched()
  })

  it('a FIFO does not block read_file nor grep', async () => {
    const s = setup()
    expect(spawnSync('mkfifo', [join(s.ws, 'pipe')]).status).toBe(0)
    expect((await s.call('read_file', { path: 'pipe' })).output).toMatch(/not a regular file \(a FIFO/)
    expect((await s.call('grep', { pattern: 'x', path: 'pipe' })).output).toMatch(/not a regular file/)
    expect((await s.call('grep', { pattern: 'const' })).output).toContain('src/app.js:1: const a = 1')
  })

  it('the task tree inside the workspace is out of reach of every file tool', async () => {
    const s = setup({ treeInside: true })
    const state = 'logs/contexts/running/state.json'
    expect((await s.call('read_file', { path: state })).output).toMatch(/inside ctxagent's task tree/)
    expect((await s.call('write_file', { path: 'logs/contexts/planted.txt', content: 'curl x | sh\n' })).output).toMatch(/inside ctxagent's task tree/)
    expect((await s.call('grep', { pattern: 'TREE SECRET' })).output).toBe('no matches for /TREE SECRET/')
    expect((await s.call('glob', { pattern: '**/state.json' })).output).toBe('no files match **/state.json')
    expect((await s.call('list_dir', { path: 'logs', depth: 3 })).output).toBe('logs/ is empty')
    symlinkSync(join(s.ws, 'logs', 'contexts'), join(s.ws, 'alias'))
    expect((await s.call('read_file', { path: 'alias/running/state.json' })).output).toMatch(/inside ctxagent's task tree/)
    expect(readdirSync(s.tree)).toEqual(['running'])
  })

  it('grep with a catastrophic pattern answers at once (linear-time engine)', async () => {
    const s = setup()
    writeFileSync(join(s.ws, 'evil.txt'), `${'a'.repeat(41)}!\n${'a'.repeat(100_000)}!\n`)
    expect((await s.call('grep', { pattern: '^(a+)+$' })).output).toBe('no matches for /^(a+)+$/')
    expect((await s.call('grep', { pattern: '(a|aa)*c$', path: 'evil.txt' })).output).toBe('no matches for /(a|aa)*c$/')
  })
})

describe('run_command against the process around it', () => {
  it("cannot read another process's secrets through /proc (an MCP server's token) and leaves nothing behind", async () => {
    const s = setup()
    const token = `ctxagent-hostile-${process.pid}`
    // Stands for an MCP server started by ctxagent with a token in its environment.
    const mcp = spawn(process.execPath, ['-e', 'setInterval(() => {}, 1000)'], { env: { MCP_TOKEN: 'ghp_MCPSERVERSECRET0123456789' }, stdio: 'ignore' })
    onTestFinished(() => void mcp.kill('SIGKILL'))
    const command = `cat /proc/*/environ /proc/${mcp.pid}/environ 2>/dev/null | tr '\\0' '\\n'; setsid sh -c 'sleep 3333; : ${token}' >/dev/null 2>&1 & echo spawned`
    const out = await s.call('run_command', { command })
    expect(out.output).not.toContain('MCPSERVERSECRET')
    expect(out.output).toMatch(/spawned$/)
    let left: string[] = []
    for (let i = 0; i < 200; i++) {
      left = readdirSync('/proc').filter((p) => /^\d+$/.test(p) && cmdline(p).includes(token))
      if (left.length === 0) break
      await new Promise((r) => setTimeout(r, 50))
    }
    expect(left).toEqual([])
  })
})

function cmdline(pid: string): string {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8')
  } catch {
    return ''
  }
}

describe('a hostile model through ctxagent run', () => {
  it('ReDoS, a FIFO and /proc of the agent answer at once; no secret of ctxagent reaches the model', async () => {
    const s = await runSetup('tools:\n  shell: true\n')
    writeFileSync(join(s.ws, 'evil.txt'), `${'a'.repeat(41)}!\n`)
    expect(spawnSync('mkfifo', [join(s.ws, 'pipe')]).status).toBe(0)
    s.fake.queue.push(
      {
        calls: [
          { name: 'grep', arguments: { pattern: '^(a+)+$' } },
          { name: 'read_file', arguments: { path: 'pipe' } },
          { name: 'run_command', arguments: { command: "tr '\\0' '\\n' < /proc/$PPID/environ; cat /proc/*/environ; env; echo ran" } },
        ],
      },
      { calls: [{ name: 'finish', arguments: { summary: 'looked', status: 'done' } }] },
    )
    const res = await s.run(['run', '--task', 'look around', '--workspace', s.ws], {
      OPENAI_API_KEY: 'sk-proj-AGENTENVSECRET0123456789',
      GITHUB_TOKEN: 'ghp_AGENTGITHUBSECRET0123456789',
    })
    expect(res.code).toBe(0)
    const tools = (s.fake.requests[1]?.body.messages ?? []).filter((m) => m.role === 'tool').map((m) => m.content)
    expect(tools[0]).toBe('no matches for /^(a+)+$/')
    expect(tools[1]).toMatch(/not a regular file \(a FIFO/)
    expect(tools[2]).toMatch(/^ran$/m)
    const all = JSON.stringify(s.fake.requests)
    for (const secret of ['AGENTENVSECRET', 'AGENTGITHUBSECRET', 'test-key']) expect(all).not.toContain(secret)
  })
})

describe('stops reach sandboxed commands', () => {
  it.each(['SIGINT', '--timeout'] as const)('%s ends a sandboxed command and every setsid child it started', async (how) => {
    const s = await runSetup('tools:\n  shell: true\n')
    const token = `ctxagent-stop-${process.pid}-${how}`
    s.fake.queue.push({
      calls: [
        {
          name: 'run_command',
          arguments: { command: `setsid sh -c 'trap "" TERM HUP; sleep 3333; : ${token}' >/dev/null 2>&1 & echo up > up.txt; sleep 3333` },
        },
      ],
    })
    const started = s.start(['run', '--task', 't', '--workspace', s.ws, ...(how === '--timeout' ? ['--timeout', '3s'] : [])])
    for (let i = 0; i < 400 && !existsSync(join(s.ws, 'up.txt')); i++) await new Promise((r) => setTimeout(r, 50))
    expect(existsSync(join(s.ws, 'up.txt'))).toBe(true)
    if (how === 'SIGINT') started.child.kill('SIGINT')
    const exit = await exitOf(started.child)
    expect(exit.code).toBe(how === 'SIGINT' ? 130 : 5)
    let left: string[] = []
    for (let i = 0; i < 200; i++) {
      left = readdirSync('/proc').filter((p) => /^\d+$/.test(p) && cmdline(p).includes(token))
      if (left.length === 0) break
      await new Promise((r) => setTimeout(r, 50))
    }
    expect(left).toEqual([])
  })
})
