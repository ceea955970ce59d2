import { execFileSync } from 'node:child_process'
import {
  chmodSync,
  chownSync,
  linkSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, expect, it, onTestFinished } from 'vitest'
import { parseConfig } from '../../src/config/load.js'
import { UsageError } from '../../src/errors.js'
import { describeNetwork, describeSandbox, planSandbox } from '../../src/tools/sandbox.js'
import { giveWorkspace, sandboxIdentity } from '../../src/tools/sandbox/identity.js'
import { cli } from '../helpers/run.js'
import { killWithDescendants, pidsHolding as holding } from '../helpers/processes.js'
import { setup, sleep } from './fixture.js'

/** Pids whose parent is `pid` (proc(5): field 4 of /proc/<pid>/stat). */
function childrenOf(pid: number): number[] {
  return readdirSync('/proc')
    .filter((p) => /^\d+$/.test(p))
    .filter((p) => {
      try {
        const stat = readFileSync(`/proc/${p}/stat`, 'utf8')
        return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1] === String(pid)
      } catch {
        return false
      }
    })
    .map(Number)
}

async function settledHolding(token: string): Promise<number[]> {
  // A killed namespace takes a moment to be reaped; waits on the event, never asserts on time.
  for (let i = 0; i < 200 && holding(token).length > 0; i++) await sleep(50)
  return holding(token)
}

const SECRET = 'sk-proj-SANDBOXSECRET1234567890'

describe('run_command in bubblewrap', () => {
  it("cannot read ctxagent's environment through /proc, nor its own parent's", async () => {
    const s = setup()
    process.env.OPENAI_API_KEY = SECRET
    process.env.HARMLESS_VAR = 'visible-outside'
    onTestFinished(() => {
      delete process.env.OPENAI_API_KEY
      delete process.env.HARMLESS_VAR
    })
    const command = `for f in /proc/*/environ /proc/$PPID/environ /proc/${process.pid}/environ; do tr '\\0' '\\n' < $f; done 2>&1; env; cat /proc/1/cmdline; ls /proc`
    const out = await s.call('run_command', { command })
    expect(out.output).toMatch(/^exit code \d+\n/)
    expect(out.output).not.toContain(SECRET)
    // Not even a harmless variable of ctxagent's: the command's environment is built from nothing.
    expect(out.output).not.toContain('visible-outside')
    expect(out.output).toMatch(/^PAGER=cat$/m)
  })

  it('kills setsid and nohup children when the command ends (and without the sandbox they would survive)', async () => {
    const token = `ctxagent-setsid-${process.pid}-${Date.now()}`
    const command = `setsid sh -c 'sleep 3333; : ${token}' >/dev/null 2>&1 & nohup sh -c 'trap "" HUP TERM; sleep 3334; : ${token}' >/dev/null 2>&1 & sleep 0.3; echo started`
    const s = setup()
    expect((await s.call('run_command', { command })).output).toBe('exit code 0\nstarted')
    expect(await settledHolding(token)).toEqual([])
    // The same command without a sandbox leaves its setsid child behind: the check above can fail.
    const bare = setup({ sandbox: { kind: 'none' } })
    const plainToken = `${token}-none`
    await bare.call('run_command', { command: command.replaceAll(token, plainToken) })
    const left = holding(plainToken)
    killWithDescendants(left)
    expect(left.length).toBeGreaterThan(0)
  })

  it('a stop while bwrap is still making the sandbox ends everything in it, and the call returns', async () => {
    // bwrap's init arms --die-with-parent only once its mounts are made (do_init): a thousand read-only mounts
    // hold it there, so the stop comes while the monitor alone could be signalled (tools/sandbox/sandbox-child.ts).
    const s = setup()
    const many = join(s.root, 'many')
    const dirs = Array.from({ length: 1000 }, (_, i) => join(many, String(i)))
    for (const d of dirs) mkdirSync(d, { recursive: true })
    const plan = planSandbox({ sandbox: 'bwrap', network: false, sandbox_read_only: dirs }, [s.tree], s.ws)
    if (!plan.ok) throw new Error(plan.why)
    for (let round = 0; round < 3; round++) {
      const token = `ctxagent-early-${process.pid}-${round}-${Date.now()}`
      const stop = new AbortController()
      // The stop comes as soon as the monitor has a child: the sandbox's init, still making its mounts.
      const started = (monitor: number): void => {
        const look = (): void => {
          if (childrenOf(monitor).length > 0) stop.abort()
          else if (!stop.signal.aborted) setImmediate(look)
        }
        setImmediate(look)
      }
      const out = await s.tools.call(
        { id: 'c', type: 'function', function: { name: 'run_command', arguments: JSON.stringify({ command: `sleep 3335; : ${token}` }) } },
        { ...s.ctx, sandbox: plan.plan, signal: stop.signal, commands: { started, ended: () => undefined } },
      )
      expect(out.output).toMatch(/^aborted/)
      expect(await settledHolding(token)).toEqual([])
    }
  })

  it('writes only to the workspace; the system is read-only, the rest absent', async () => {
    const s = setup()
    const out = await s.call('run_command', {
      command: `touch ${s.outside}/x; cat ${s.outside}/secret.txt; touch /usr/x /etc/x; ls ${s.root}; echo hi > made.txt; echo done`,
    })
    expect(out.output).toContain('Read-only file system')
    expect(out.output).not.toContain('TOP SECRET')
    // stdout and stderr are two pipes: their lines interleave in either order.
    expect(out.output).toMatch(/^done$/m)
    expect(readFileSync(join(s.ws, 'made.txt'), 'utf8')).toBe('hi\n')
    s.outsideUntouched()
  })

  it('hides a task tree and a config file that lie inside the workspace', async () => {
    const s = setup({ treeInside: true })
    const config = join(s.ws, 'config.yaml')
    writeFileSync(config, 'llm:\n  openai:\n    api_key: CONFIG-SECRET\n')
    const plan = planSandbox({ sandbox: 'bwrap', network: false, sandbox_read_only: [] }, [s.tree, config], s.ws)
    if (!plan.ok) throw new Error(plan.why)
    const command = 'cat config.yaml; find logs -type f; cat logs/contexts/running/state.json; echo x > logs/contexts/planted; echo end'
    const out = await s.tools.call(
      { id: 'c', type: 'function', function: { name: 'run_command', arguments: JSON.stringify({ command }) } },
      { ...s.ctx, sandbox: plan.plan },
    )
    expect(out.output).not.toContain('CONFIG-SECRET')
    expect(out.output).not.toContain('TREE SECRET')
    expect(out.output).toMatch(/^end$/m)
    expect(readdirSync(s.tree)).toEqual(['running'])
    expect(readFileSync(config, 'utf8')).toContain('CONFIG-SECRET')
  })

  it('keeps exit codes, signals, timeouts and the output cap', async () => {
    const s = setup()
    expect((await s.call('run_command', { command: 'exit 42' })).output).toBe('exit code 42\n(no output)')
    expect((await s.call('run_command', { command: 'kill -KILL $$' })).output).toBe('killed by SIGKILL\n(no output)')
    expect(await s.call('run_command', { command: 'trap "" TERM; sleep 300', timeout_seconds: 1 })).toMatchObject({
      status: 'error',
      error: 'timed out after 1s',
    })
    const big = await s.call('run_command', { command: 'seq 1 200000' })
    expect(big.output.length).toBeLessThanOrEqual(30_000)
    expect(big.output).toMatch(/\n200000$/)
  })

  it("has no network unless tools.network allows it: none and proxy only lo, host the host's", async () => {
    const s = setup()
    const interfaces = "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '"
    expect((await s.call('run_command', { command: interfaces })).output).toBe('exit code 0\nlo')
    const withNetwork = async (network: boolean | 'host') => {
      const planned = planSandbox({ sandbox: 'bwrap', network, sandbox_read_only: [] }, [], s.ws)
      if (!planned.ok) throw new Error(planned.why)
      return (
        await s.tools.call(
          { id: 'n', type: 'function', function: { name: 'run_command', arguments: JSON.stringify({ command: interfaces }) } },
          { ...s.ctx, sandbox: planned.plan },
        )
      ).output
    }
    // true is proxy: still only lo (the proxy is reached through a socket, test/torture/hostile-network.test.ts).
    expect(await withNetwork(true)).toBe('exit code 0\nlo')
    const host = readFileSync('/proc/net/dev', 'utf8').trim().split('\n').length - 2
    expect((await withNetwork('host')).split('\n').length - 1).toBe(host)
  })

  it('config keys say precisely what is wrong', () => {
    expect(() => parseConfig('tools:\n  sandbox: auto\n')).toThrow('config.yaml: tools.sandbox must be bwrap or none')
    expect(() => parseConfig('tools:\n  sandbox_read_only: [relative]\n')).toThrow('config.yaml: tools.sandbox_read_only[0] must be an absolute path')
    expect(() => parseConfig('tools:\n  network: yes\n')).toThrow('config.yaml: tools.network must be none, proxy or host (false is none, true is proxy)')
    expect(parseConfig('tools:\n  network: true\n').tools.network).toBe('proxy')
    expect(parseConfig('tools:\n  network: false\n').tools.network).toBe('none')
    expect(parseConfig('tools:\n  network: host\n').tools.network).toBe('host')
    expect(() => parseConfig('tools:\n  allowed_hosts: [https://github.com]\n')).toThrow(
      'config.yaml: tools.allowed_hosts[0] must be a list of host names, *.suffix patterns or IP addresses',
    )
    expect(() => parseConfig('tools:\n  allowed_networks: [10.0.0.0/33]\n')).toThrow(
      'config.yaml: tools.allowed_networks[0] must be a list of networks in CIDR form',
    )
    expect(parseConfig('tools:\n  allowed_hosts: [registry.npmjs.org, "*.pypi.org"]\n  allowed_networks: [10.1.2.3/32]\n').tools).toMatchObject({
      allowed_hosts: ['registry.npmjs.org', '*.pypi.org'],
      allowed_networks: ['10.1.2.3/32'],
    })
    expect(parseConfig('').tools).toMatchObject({
      sandbox: 'bwrap',
      network: 'none',
      allowed_hosts: null,
      allowed_networks: [],
      sandbox_read_only: [],
      sandbox_user: null,
      limits: { memory_mb: 4096, processes: 1024, file_size_mb: 1024, open_files: 4096, cpu_seconds: 600 },
    })
    expect(() => parseConfig('tools:\n  sandbox_user: "a b"\n')).toThrow(
      'config.yaml: tools.sandbox_user must be a user name or uid[:gid], like nobody or 1000:1000',
    )
    expect(() => parseConfig('tools:\n  limits:\n    processes: 0\n')).toThrow('config.yaml: tools.limits.processes must be a positive integer')
    expect(() => parseConfig('tools:\n  limits:\n    swap_mb: 1\n')).toThrow('tools.limits')
    expect(parseConfig('tools:\n  sandbox_user: "1000:1000"\n  limits:\n    memory_mb: 512\n').tools).toMatchObject({
      sandbox_user: '1000:1000',
      limits: { memory_mb: 512, processes: 1024 },
    })
    expect(() => parseConfig('mcp:\n  servers:\n    x:\n      command: node\n      sandbox: off\n')).toThrow(
      'config.yaml: mcp.servers.x.sandbox must be bwrap or none',
    )
    expect(parseConfig('mcp:\n  servers:\n    x:\n      command: node\n').mcp.servers.x).toMatchObject({
      sandbox: 'bwrap',
      network: 'none',
      allowed_hosts: null,
    })
    expect(parseConfig('mcp:\n  servers:\n    x:\n      command: node\n      network: true\n').mcp.servers.x).toMatchObject({ network: 'proxy' })
  })
})

describe('the identity commands run as', () => {
  const dir = () => {
    const d = mkdtempSync(join(tmpdir(), 'ctxagent-ident-'))
    onTestFinished(() => rmSync(d, { recursive: true, force: true }))
    return d
  }
  const root = { uid: 0, gid: 0 }

  it('as root: tools.sandbox_user, else the workspace owner, else nobody; never uid or gid 0', () => {
    const ws = dir()
    chownSync(ws, 0, 0)
    expect(sandboxIdentity({ sandbox_user: null }, ws, root)).toMatchObject({ uid: 65534, gid: 65534, name: 'nobody', why: 'nobody' })
    chownSync(ws, 4321, 0)
    expect(sandboxIdentity({ sandbox_user: null }, ws, root)).toMatchObject({ uid: 4321, gid: 65534, why: 'workspace owner' })
    chownSync(ws, 4321, 4322)
    expect(sandboxIdentity({ sandbox_user: null }, ws, root)).toMatchObject({ uid: 4321, gid: 4322 })
    expect(sandboxIdentity({ sandbox_user: '2000:3000' }, ws, root)).toMatchObject({ uid: 2000, gid: 3000, why: 'tools.sandbox_user' })
    expect(sandboxIdentity({ sandbox_user: 'nobody' }, ws, root)).toMatchObject({ uid: 65534, name: 'nobody' })
    expect(() => sandboxIdentity({ sandbox_user: 'root' }, ws, root)).toThrow(UsageError)
    expect(() => sandboxIdentity({ sandbox_user: '0' }, ws, root)).toThrow('commands never run as root')
    expect(() => sandboxIdentity({ sandbox_user: '1000:0' }, ws, root)).toThrow('commands never run as root')
    expect(() => sandboxIdentity({ sandbox_user: 'no-such-user-here' }, ws, root)).toThrow('/etc/passwd has no such user')
  })

  it('not root: its own uid and gid; tools.sandbox_user naming someone else is a usage error', () => {
    const ws = dir()
    const self = { uid: 1234, gid: 1235 }
    expect(sandboxIdentity({ sandbox_user: null }, ws, self)).toMatchObject({ uid: 1234, gid: 1235, why: 'self' })
    expect(sandboxIdentity({ sandbox_user: '1234:1235' }, ws, self)).toMatchObject({ uid: 1234 })
    expect(() => sandboxIdentity({ sandbox_user: 'nobody' }, ws, self)).toThrow('only root can run commands as another user')
  })

  it.runIf(process.getuid?.() === 0)('as root, the file tools give what they create the owner of its directory, so a command can change it', async () => {
    const s = setup()
    expect((await s.call('write_file', { path: 'deep/new/made.txt', content: 'model wrote\n' })).status).toBe('success')
    for (const p of ['deep', 'deep/new', 'deep/new/made.txt']) expect(statSync(join(s.ws, p))).toMatchObject({ uid: 65534, gid: 65534 })
    const out = await s.call('run_command', { command: 'echo command wrote >> deep/new/made.txt && id -u' })
    expect(out.output).toBe('exit code 0\n65534')
    expect(readFileSync(join(s.ws, 'deep/new/made.txt'), 'utf8')).toBe('model wrote\ncommand wrote\n')
    // Replacing keeps the owner of the file replaced.
    await s.call('read_file', { path: 'deep/new/made.txt' })
    expect((await s.call('edit_file', { path: 'deep/new/made.txt', old_string: 'model', new_string: 'the model' })).status).toBe('success')
    expect(statSync(join(s.ws, 'deep/new/made.txt')).uid).toBe(65534)
  })

  it.runIf(process.getuid?.() === 0)('giveWorkspace hands a workspace root made to the identity, never following a link out of it', () => {
    const top = dir()
    chmodSync(top, 0o700)
    const ws = join(top, 'ws')
    const outside = join(top, 'outside')
    mkdirSync(join(ws, 'src'), { recursive: true })
    mkdirSync(outside)
    writeFileSync(join(ws, 'src', 'a.js'), '1\n')
    symlinkSync(outside, join(ws, 'out'))
    // A hard link to a file of root's outside (as a command could plant where fs.protected_hardlinks is off).
    writeFileSync(join(outside, 'secret'), 'root only\n', { mode: 0o600 })
    linkSync(join(outside, 'secret'), join(ws, 'src', 'linked'))
    // And to one of root's that is not a regular file (a FIFO; a socket alike): its inode is root's as well.
    execFileSync('mkfifo', ['-m', '600', join(outside, 'pipe')])
    linkSync(join(outside, 'pipe'), join(ws, 'src', 'pipe'))
    giveWorkspace(ws, { uid: 4321, gid: 4322, name: '4321', why: 'tools.sandbox_user' })
    for (const p of ['', 'src', 'src/a.js']) expect(statSync(join(ws, p))).toMatchObject({ uid: 4321, gid: 4322 })
    expect(lstatSync(join(ws, 'out')).uid).toBe(4321)
    expect(statSync(outside).uid).toBe(0)
    expect(statSync(join(outside, 'secret')).uid).toBe(0)
    expect(lstatSync(join(outside, 'pipe')).uid).toBe(0)
    expect(statSync(top).mode & 0o777).toBe(0o711)
  })

  it('doctor says the identity, the limits and the seccomp filter in force', () => {
    const detail = describeSandbox({ sandbox: 'bwrap', network: false, sandbox_read_only: [], sandbox_user: '2000:3000' }).detail
    if (process.getuid?.() === 0) expect(detail).toContain('uid 2000, gid 3000; tools.sandbox_user')
    expect(detail).toContain('no capabilities, no_new_privs, seccomp refusing')
    expect(detail).toContain('limits: memory 4096 MB, 1024 processes, files up to 1024 MB, 4096 open files, 600 s CPU')
    expect(detail).toContain('network off')
    expect(describeNetwork({ network: true })).toBe('network through the egress proxy to any public host')
    expect(describeNetwork({ network: 'proxy', allowed_hosts: ['github.com', '*.pypi.org'], allowed_networks: ['10.1.2.3/32'] })).toBe(
      'network through the egress proxy to 2 allowed host(s) (and 10.1.2.3/32)',
    )
    expect(describeNetwork({ network: 'host' })).toBe("network: the host's (tools.network: host)")
  })
})

describe('where bubblewrap is missing', () => {
  const missing = { CTXAGENT_BWRAP: '/nonexistent/bwrap' }

  it('plans no sandbox and describeSandbox says why; tools.sandbox: none is the explicit way out', () => {
    const tools = { sandbox: 'bwrap' as const, network: false, sandbox_read_only: [] }
    expect(planSandbox(tools, [], '/tmp', missing)).toEqual({ ok: false, why: '/nonexistent/bwrap is not installed (apt-get install bubblewrap)' })
    expect(describeSandbox(tools, missing)).toMatchObject({ mode: 'bwrap', ok: false })
    expect(describeSandbox(tools, missing).detail).toContain('tools.sandbox: none')
    expect(describeSandbox({ ...tools, sandbox: 'none' }, missing)).toMatchObject({ mode: 'none', ok: true })
    expect(describeSandbox(tools)).toMatchObject({ mode: 'bwrap', ok: true })
  })

  it('refuses run --allow-shell at start, in one line naming tools.sandbox: none (exit 2, nothing written)', () => {
    const home = mkdtempSync(join(tmpdir(), 'ctxagent-nobwrap-'))
    onTestFinished(() => rmSync(home, { recursive: true, force: true }))
    const ws = join(home, 'ws')
    mkdirSync(ws)
    const res = cli(['run', '--task', 'hi', '--allow-shell', '--provider', 'ollama', '--workspace', ws], { ...missing, CTXAGENT_HOME: join(home, 'tree') }, ws)
    expect(res.stderr).toMatch(/^ctxagent: run_command needs a sandbox, and bubblewrap does not work here: .*tools\.sandbox: none.*\n$/)
    expect(res.code).toBe(2)
    expect(readdirSync(home)).toEqual(['ws'])
  })
})
