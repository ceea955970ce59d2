import { spawn, spawnSync } from 'node:child_process'
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs'
import module from 'node:module'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, expect, it, onTestFinished } from 'vitest'
import { startFakeLlm } from '../helpers/fake-llm.js'
import { BIN, cli, ROOT, TEST_ENV } from '../helpers/run.js'

const COMMANDS = ['view', 'stats', 'cleanup', 'compress', 'watch-locks', 'unlock', 'reindex', 'config']

function scratch(): string {
  const dir = mkdtempSync(join(tmpdir(), 'ctxagent-cli-'))
  onTestFinished(() => rmSync(dir, { recursive: true, force: true }))
  return dir
}

describe('ctxagent binary', () => {
  it('prints help and version', () => {
    const help = cli(['--help'])
    expect(help.code).toBe(0)
    for (const c of COMMANDS) expect(help.stdout).toContain(c)
    expect(cli([]).stdout).toContain('Usage: ctxagent')
    expect(cli(['--version']).stdout.trim()).toMatch(/^\d+\.\d+\.\d+$/)
  })

  it('shows every default a person would type: durations as durations, never milliseconds', () => {
    for (const c of [...COMMANDS, 'run', 'pause', 'comment', 'chat', 'demo']) {
      const help = cli([c, '--help'])
      expect(help.code).toBe(0)
      expect(help.stdout, c).not.toMatch(/\(default: \d{4,}\)/)
    }
    expect(cli(['chat', '--help']).stdout).toMatch(/reply, or for --end \(default: 5m\)/)
  })

  it("names each option's default once: the help's own text, not commander's as well", () => {
    for (const c of [...COMMANDS, 'run', 'pause', 'comment', 'chat', 'demo', 'doctor', 'export', 'enqueue', 'worker', 'poll', 'jobs', 'serve']) {
      const help = cli([c, '--help'], { COLUMNS: '80' })
      expect(help.code).toBe(0)
      // One entry per option: its first line and the lines its description wraps onto.
      const entries = help.stdout.split(/\n(?= {2}-)/)
      for (const entry of entries) expect(entry.match(/\(default:? /g)?.length ?? 0, `${c}: ${entry}`).toBeLessThanOrEqual(1)
    }
  })

  it('says in one line how to build it when the bundle is missing', () => {
    const copy = scratch()
    mkdirSync(join(copy, 'bin'))
    copyFileSync(join(ROOT, 'bin', 'ctxagent'), join(copy, 'bin', 'ctxagent'))
    writeFileSync(join(copy, 'package.json'), '{"type":"module"}\n')
    const res = spawnSync(process.execPath, [join(copy, 'bin', 'ctxagent'), '--version'], { encoding: 'utf8' })
    expect(res.status).toBe(1)
    expect(res.stderr).toBe(`ctxagent: not built yet, ${join(copy, 'bundle', 'start.js')} is missing (run npm ci, or npm run build, in ${copy}/)\n`)
  })

  it.each(COMMANDS)('prints help for %s', (command) => {
    const res = cli([command, '--help'])
    expect(res.code).toBe(0)
    expect(res.stdout).toContain(`Usage: ctxagent ${command}`)
  })

  it.each(['../x', '/etc/passwd', '*', '', '1234567', 'abcdefgh-xyz'])('rejects task id %j with exit 2 and creates nothing', (id) => {
    const cwd = scratch()
    const home = join(cwd, 'home')
    const res = cli(['unlock', id, '--home', home], {}, cwd)
    expect(res.code).toBe(2)
    expect(res.stderr).toMatch(/^ctxagent: .+ \(.+\)\n$/)
    expect(existsSync(home)).toBe(false)
    expect(readdirSync(cwd)).toEqual([])
  })

  it('reports an unknown task with exit 3', () => {
    const res = cli(['unlock', 'abcdef01', '--home', scratch()])
    expect(res.code).toBe(3)
    expect(res.stderr).toMatch(/^ctxagent: no task abcdef01 in .+\n$/)
  })

  it('rejects a bad config file with exit 2, the key path, and no change on disk', () => {
    const cwd = scratch()
    writeFileSync(join(cwd, 'ctxagent.yaml'), 'llm:\n  openai:\n    context_length: -1\n')
    for (const command of [['reindex'], ['watch-locks', '--once'], ['unlock', 'abcdef0123']]) {
      const res = cli([...command, '--home', join(cwd, 'home')], { CTXAGENT_CONFIG: 'ctxagent.yaml' }, cwd)
      expect(res.code).toBe(2)
      expect(res.stderr).toBe(
        'ctxagent: ctxagent.yaml: llm.openai.context_length must be a positive integer (see config.example.yaml for every key and its default)\n',
      )
    }
    const viaFlag = cli(['reindex', '--config', 'missing.yaml', '--home', join(cwd, 'home')], {}, cwd)
    expect(viaFlag.code).toBe(2)
    expect(readdirSync(cwd)).toEqual(['ctxagent.yaml'])
  })

  it('rejects unknown flags and bad option values with exit 2 and one line', () => {
    const unknown = cli(['reindex', '--frobnicate'])
    expect(unknown.code).toBe(2)
    // The error points to the subcommand's own help.
    expect(unknown.stderr).toBe("ctxagent: unknown option '--frobnicate' (see ctxagent reindex --help)\n")
    expect(cli(['--home', '/tmp', 'stats', '--frob']).stderr).toMatch(/\(see ctxagent stats --help\)\n$/)
    const badDuration = cli(['watch-locks', '--interval', 'soon'])
    expect(badDuration.code).toBe(2)
    expect(badDuration.stderr.split('\n')).toHaveLength(2)
    expect(cli(['frobnicate']).code).toBe(2)
  })

  it('shows a stack trace only with CTXAGENT_DEBUG=1', () => {
    const cwd = scratch()
    writeFileSync(join(cwd, 'ctxagent.yaml'), 'locks: [1\n')
    expect(cli(['reindex', '--config', 'ctxagent.yaml'], {}, cwd).stderr.split('\n')).toHaveLength(2)
    expect(cli(['reindex', '--config', 'ctxagent.yaml'], { CTXAGENT_DEBUG: '1' }, cwd).stderr).toMatch(/\n\s+at /)
  })

  it('resolves the base directory: --home > CTXAGENT_HOME > config > $XDG_STATE_HOME/ctxagent', () => {
    const cwd = scratch()
    const dirs = ['flag', 'env', 'conf', 'state/ctxagent']
    for (const d of dirs) mkdirSync(join(cwd, d, 'completed'), { recursive: true })
    const indexedIn = () => dirs.filter((d) => existsSync(join(cwd, d, 'tasks.db')))
    const reset = () => dirs.forEach((d) => rmSync(join(cwd, d, 'tasks.db'), { force: true }))
    const xdg = { XDG_STATE_HOME: join(cwd, 'state') }
    writeFileSync(join(cwd, 'ctxagent.yaml'), 'context:\n  base_dir: conf\n')
    expect(cli(['reindex', '--home', 'flag'], { ...xdg, CTXAGENT_HOME: join(cwd, 'env') }, cwd).code).toBe(0)
    expect(indexedIn()).toEqual(['flag'])
    reset()
    cli(['reindex'], { ...xdg, CTXAGENT_HOME: join(cwd, 'env'), CTXAGENT_CONFIG: 'ctxagent.yaml' }, cwd)
    expect(indexedIn()).toEqual(['env'])
    reset()
    cli(['reindex'], { ...xdg, CTXAGENT_CONFIG: 'ctxagent.yaml' }, cwd)
    expect(indexedIn()).toEqual(['conf'])
    reset()
    // Found in the current directory, it is not read.
    cli(['reindex'], xdg, cwd)
    expect(indexedIn()).toEqual(['state/ctxagent'])
    reset()
    rmSync(join(cwd, 'ctxagent.yaml'))
    cli(['reindex'], xdg, cwd)
    expect(indexedIn()).toEqual(['state/ctxagent'])
    expect(existsSync(join(cwd, 'logs'))).toBe(false)
  })

  it('exits 3 for a missing tree from watch-locks --once and cleanup, as stats does', () => {
    const missing = join(scratch(), 'typo')
    for (const args of [['watch-locks', '--once'], ['watch-locks', '--once', '--json'], ['cleanup'], ['stats']]) {
      const res = cli([...args, '--home', missing])
      expect(res.code, args.join(' ')).toBe(3)
      expect(res.stderr).toMatch(/^ctxagent: there is no task tree at .+typo \(check --home, CTXAGENT_HOME or context\.base_dir\)\n$/)
    }
    expect(existsSync(missing)).toBe(false)
  })

  it('watch-locks --once --json prints one summary per pass, also when nothing happened', () => {
    const home = scratch()
    mkdirSync(join(home, 'running'))
    const res = cli(['watch-locks', '--once', '--json', '--home', home], { CTXAGENT_NOW: '2024-05-01T00:00:00Z' })
    expect(res.code).toBe(0)
    expect(JSON.parse(res.stdout)).toEqual({
      pass: { ts: '2024-05-01T00:00:00.000Z', checked: 0, recovered: 0, alerts: 0, chat_sessions: 0, reindexed: 0, resumed: 0 },
    })
  })
})

describe("Node's compile cache (Node 22.10 and later; docs/development.md#start-up)", () => {
  it.skipIf(typeof (module as { flushCompileCache?: unknown }).flushCompileCache !== 'function')(
    'a run killed at its first request has already kept its compiled code for the next command',
    async () => {
      const dir = scratch()
      const cache = join(dir, 'cache')
      const fake = await startFakeLlm()
      const config = join(dir, 'config.yaml')
      writeFileSync(config, fake.configYaml())
      const ws = join(dir, 'ws')
      mkdirSync(ws)
      writeFileSync(join(ws, 'README.md'), 'a workspace\n')
      // The cache bin/ctxagent turns on: none that the environment would choose or turn off instead.
      const { NODE_COMPILE_CACHE: _dir, NODE_DISABLE_COMPILE_CACHE: _off, ...inherited } = process.env
      const child = spawn(process.execPath, [BIN, 'run', '--task', 'read the readme', '--workspace', ws, '--home', join(dir, 'home'), '--config', config], {
        env: { ...inherited, ...TEST_ENV, XDG_CACHE_HOME: cache },
        stdio: ['ignore', 'ignore', 'pipe'],
      })
      let stderr = ''
      child.stderr.on('data', (d: Buffer) => (stderr += d.toString()))
      const killed = new Promise<NodeJS.Signals | null>((resolve) => child.on('close', (_code, signal) => resolve(signal)))
      // Its first request: SIGKILL, so that Node's own write at exit never happens.
      fake.fallback = () => {
        child.kill('SIGKILL')
        return { content: 'never read' }
      }
      expect(await killed, stderr).toBe('SIGKILL')
      const kept = readdirSync(join(cache, 'ctxagent', 'v8'), { recursive: true }).filter((f) => statSync(join(cache, 'ctxagent', 'v8', String(f))).isFile())
      expect(kept.length).toBeGreaterThan(10)
    },
  )
})
