import { spawn, spawnSync } from 'node:child_process'
import { chmodSync, chownSync, existsSync, mkdirSync, mkdtempSync, realpathSync, rmSync, statSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, expect, it, onTestFinished } from 'vitest'
import { planSandbox } from '../../src/tools/sandbox.js'
import { startFakeLlm } from '../helpers/fake-llm.js'
import { BIN, TEST_ENV } from '../helpers/run.js'
import { SANDBOX_GID, SANDBOX_UID } from '../helpers/sandbox-owner.js'
import { exitOf } from '../helpers/wait.js'
import { onlyTask, runSetup } from '../run/harness.js'
import { setup, sleep } from '../tools/fixture.js'
import { record } from './report.js'
import { reachableRoot } from '../helpers/reachable.js'

/*
 * Issue #27: a hostile command, as root and as an unprivileged user, against the
 * sandbox's identity, capabilities, seccomp filter, mounts and limits. The same checks
 * run through run_command's execution path (root) and through a real `ctxagent run
 * --allow-shell` against the fake LLM (root, and a user started through setpriv).
 */

const ROOT_SECRET = '/etc/ctxagent-test-secret.env'
const LIMITS = { memory_mb: 128, processes: 32, file_size_mb: 1, open_files: 64, cpu_seconds: 2 }
const LIMITS_YAML = `  limits:\n${Object.entries(LIMITS)
  .map(([k, v]) => `    ${k}: ${v}\n`)
  .join('')}`

// Syscall numbers from the kernel headers (<asm/unistd_64.h>, <asm-generic/unistd.h>), kept apart from src/ so a wrong number there is caught here.
const NUMBERS: Record<string, Record<string, number>> = {
  x64: {
    mount: 165,
    umount2: 166,
    pivot_root: 155,
    ptrace: 101,
    kexec_load: 246,
    kexec_file_load: 320,
    init_module: 175,
    finit_module: 313,
    delete_module: 176,
    bpf: 321,
    keyctl: 250,
    add_key: 248,
    request_key: 249,
    perf_event_open: 298,
    io_uring_setup: 425,
    io_uring_enter: 426,
    io_uring_register: 427,
    unshare: 272,
    clone: 56,
    clone3: 435,
    getpid: 39,
  },
  arm64: {
    mount: 40,
    umount2: 39,
    pivot_root: 41,
    ptrace: 117,
    kexec_load: 104,
    kexec_file_load: 294,
    init_module: 105,
    finit_module: 273,
    delete_module: 106,
    bpf: 280,
    keyctl: 219,
    add_key: 217,
    request_key: 218,
    perf_event_open: 241,
    io_uring_setup: 425,
    io_uring_enter: 426,
    io_uring_register: 427,
    unshare: 97,
    clone: 220,
    clone3: 435,
    getpid: 172,
  },
}
const nr = NUMBERS[process.arch] ?? {}
// Every syscall gets CLONE_NEWUSER|SIGCHLD as its first argument: what unshare and clone need to be refused for the right reason.
const syscalls = Object.entries(nr)
  .map(([name, n]) => `${name}=${n}`)
  .join(' ')
const SYSCALLS = `perl -e 'for (@ARGV) { my ($n, $nr) = split /=/; $! = 0; my $r = syscall($nr, 0x10000011, 0, 0, 0, 0); printf "%s %s %d\\n", $n, ($r < 0 ? "fail" : "ok"), $!+0 }' ${syscalls}${process.arch === 'x64' ? ` x32_getpid=${0x40000000 + 39}` : ''}`

interface Check {
  name: string
  command: (paths: { tree: string; config: string }) => string
  expect: (output: string, ws: string) => void
}

const CHECKS: Check[] = [
  {
    name: 'still runs what a build needs: git, node, npm, cc (under the test limits)',
    command: () =>
      `git --version; node -e 'console.log("node " + process.version)'; echo "npm $(npm --version)"; printf 'int main(void) { return 0; }\n' > t.c && cc t.c -o t && ./t && echo "cc ok"`,
    expect: (out) => {
      expect(out).toMatch(/^exit code 0$/m)
      expect(out).toMatch(/^git version \d/m)
      expect(out).toMatch(/^node v\d+/m)
      expect(out).toMatch(/^npm \d+\.\d+/m)
      expect(out).toMatch(/^cc ok$/m)
    },
  },
  {
    name: 'cannot mount or remount',
    command: () =>
      'mount -o remount,rw /usr; echo "remount=$?"; mkdir -p /tmp/m; mount -t tmpfs x /tmp/m; echo "mount=$?"; touch /usr/ctxagent-probe; echo "touch=$?"',
    expect: (out) => {
      expect(out).toMatch(/^remount=[1-9]\d*$/m)
      expect(out).toMatch(/^mount=[1-9]\d*$/m)
      expect(out).toMatch(/^touch=[1-9]\d*$/m)
      expect(existsSync('/usr/ctxagent-probe')).toBe(false)
    },
  },
  {
    name: 'has no capabilities and cannot gain them',
    command: () =>
      'grep -E "^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs|Seccomp):" /proc/self/status; unshare -U true; echo "unshare=$?"; unshare -Ur true; echo "unshare_root=$?"; id -u',
    expect: (out) => {
      for (const cap of ['CapInh', 'CapPrm', 'CapEff', 'CapBnd', 'CapAmb']) expect(out).toMatch(new RegExp(`^${cap}:\\s+0000000000000000$`, 'm'))
      expect(out).toMatch(/^NoNewPrivs:\s+1$/m)
      expect(out).toMatch(/^Seccomp:\s+2$/m)
      expect(out).toMatch(/^unshare=[1-9]\d*$/m)
      expect(out).toMatch(/^unshare_root=[1-9]\d*$/m)
      expect(out).not.toMatch(/^0$/m)
    },
  },
  {
    name: 'cannot read a root-only file, nor see the task tree or the config file',
    command: ({ tree, config }) =>
      `cat ${ROOT_SECRET}; echo "etc=$?"; cat root-only.txt; echo "ws=$?"; ls ${tree}; echo "tree=$?"; cat ${config}; echo "config=$?"; ls /etc | tr '\\n' ' '`,
    expect: (out) => {
      expect(out).not.toContain('ROOTSECRET')
      expect(out).not.toContain('test-key')
      for (const what of ['etc', 'ws', 'tree', 'config']) expect(out).toMatch(new RegExp(`^${what}=[1-9]\\d*$`, 'm'))
      expect(out).not.toContain('shadow')
    },
  },
  {
    name: 'every syscall of the seccomp list is refused (clone3 with ENOSYS); getpid still works',
    command: () => SYSCALLS,
    expect: (out) => {
      for (const name of Object.keys(nr)) {
        if (name === 'getpid') expect(out).toMatch(/^getpid ok 0$/m)
        else expect(out).toMatch(new RegExp(`^${name} fail ${name === 'clone3' ? 38 : 1}$`, 'm'))
      }
      if (process.arch === 'x64') expect(out).toMatch(/^x32_getpid fail 1$/m)
    },
  },
  {
    // Issue #36: netlink (16), packet (17) and vsock (40) answer EAFNOSUPPORT (97); Unix, IPv4 and IPv6 open.
    name: 'opens Unix, IPv4 and IPv6 sockets only: netlink, packet and vsock are refused',
    command: () =>
      `perl -e 'for (@ARGV) { my ($n, $f, $t) = split /=/; $! = 0; my $ok = socket(my $s, $f, $t, 0); printf "%s %s\\n", $n, ($ok ? "ok" : "fail " . ($!+0)) }' unix=1=1 inet=2=1 inet6=10=1 netlink=16=3 packet=17=3 vsock=40=1`,
    expect: (out) => {
      for (const ok of ['unix', 'inet', 'inet6']) expect(out).toMatch(new RegExp(`^${ok} ok$`, 'm'))
      for (const refused of ['netlink', 'packet', 'vsock']) expect(out).toMatch(new RegExp(`^${refused} fail 97$`, 'm'))
    },
  },
  {
    name: 'a bounded fork bomb stops at tools.limits.processes',
    command: () =>
      `perl -e 'my $n = 0; for (1..2000) { my $p = fork(); if (!defined $p) { print "fork failed: $!\\n"; last } if ($p == 0) { sleep 30; exit 0 } $n++ } print "children $n\\n"'`,
    expect: (out) => {
      expect(out).toMatch(/^fork failed: Resource temporarily unavailable$/m)
      const n = Number(/^children (\d+)$/m.exec(out)?.[1])
      expect(n).toBeLessThan(LIMITS.processes)
      expect(out).toContain(`${LIMITS.processes} processes and threads (tools.limits.processes)`)
    },
  },
  {
    name: 'a memory hog stops at tools.limits.memory_mb',
    command: () => `perl -e '$x = "a" x (${LIMITS.memory_mb * 3} * 1024 * 1024); print "allocated\\n"'`,
    expect: (out) => {
      expect(out).not.toContain('allocated')
      expect(out).toContain('Out of memory')
      expect(out).toContain(`memory ${LIMITS.memory_mb} MB (tools.limits.memory_mb)`)
    },
  },
  {
    name: 'cannot write a file bigger than tools.limits.file_size_mb',
    command: () => `head -c ${LIMITS.file_size_mb * 8 * 1024 * 1024} /dev/zero > big.bin; echo "head=$?"`,
    expect: (out, ws) => {
      expect(statSync(join(ws, 'big.bin')).size).toBeLessThanOrEqual(LIMITS.file_size_mb * 1024 * 1024)
      expect(out).toContain(`file size limit (tools.limits.file_size_mb = ${LIMITS.file_size_mb}) reached`)
    },
  },
  {
    name: 'cannot open more than tools.limits.open_files',
    command: () =>
      `perl -e 'my @f; for (1..1000) { open(my $h, "<", "/dev/null") or do { print "open failed: $!\\n"; last }; push @f, $h } print scalar(@f), " open\\n"'`,
    expect: (out) => {
      expect(out).toMatch(/^open failed: Too many open files$/m)
      expect(Number(/^(\d+) open$/m.exec(out)?.[1])).toBeLessThan(LIMITS.open_files)
    },
  },
  {
    name: 'a busy loop stops at tools.limits.cpu_seconds',
    command: () => `perl -e '1 while 1'`,
    expect: (out) => {
      expect(out).toMatch(/^killed by SIGXCPU$/m)
      expect(out).toContain(`CPU time limit (tools.limits.cpu_seconds = ${LIMITS.cpu_seconds}) reached`)
    },
  },
]

/** A 0600 root file in /etc for the test's length: a command must find it absent or unreadable. */
function rootSecret(): void {
  writeFileSync(ROOT_SECRET, 'CTXAGENT_DATABASE_URL=postgres://u:ROOTSECRET@db/x\n', { mode: 0o600 })
  onTestFinished(() => rmSync(ROOT_SECRET, { force: true }))
}

/** A root-owned 0600 file inside the workspace: readable only with root's file access. */
function rootOnlyIn(ws: string): void {
  writeFileSync(join(ws, 'root-only.txt'), 'ROOTSECRET in the workspace\n', { mode: 0o600 })
  chownSync(join(ws, 'root-only.txt'), 0, 0)
}

const asRoot = process.getuid?.() === 0
const setpriv = spawnSync('setpriv', ['--version']).status === 0

describe.runIf(asRoot)('a hostile command as root, through run_command', () => {
  it.each(CHECKS)('$name', async (check) => {
    rootSecret()
    const s = setup()
    rootOnlyIn(s.ws)
    const config = join(s.root, 'config.yaml')
    writeFileSync(config, 'llm:\n  openai:\n    api_key: test-key\n')
    const planned = planSandbox({ sandbox: 'bwrap', network: false, sandbox_read_only: [], limits: LIMITS }, [s.tree, config], s.ws)
    if (!planned.ok) throw new Error(planned.why)
    expect(planned.plan).toMatchObject({ kind: 'bwrap', identity: { uid: SANDBOX_UID } })
    const out = await s.tools.call(
      { id: 'h', type: 'function', function: { name: 'run_command', arguments: JSON.stringify({ command: check.command({ tree: s.tree, config }) }) } },
      { ...s.ctx, sandbox: planned.plan },
    )
    check.expect(out.output, s.ws)
  })

  it('counts tools.limits.processes per sandbox: two commands of the same user do not share it', async () => {
    const s = setup()
    const planned = planSandbox({ sandbox: 'bwrap', network: false, sandbox_read_only: [], limits: { ...LIMITS, cpu_seconds: 60 } }, [s.tree], s.ws)
    if (!planned.ok) throw new Error(planned.why)
    const ctx = { ...s.ctx, sandbox: planned.plan }
    const forks = (n: number, then: string) =>
      `perl -e 'for (1..${n}) { defined(my $p = fork()) or die "fork failed: $!\\n"; if (!$p) { sleep 600; exit 0 } } print "forked ${n}\\n"; ${then}'`
    // A holds 24 of its 32 while B, the same uid, forks 24 of its own: a shared count would stop B at 8.
    const a = s.tools.call(
      {
        id: 'a',
        type: 'function',
        function: { name: 'run_command', arguments: JSON.stringify({ command: forks(24, 'open(my $r, ">", "held") and close($r); sleep 1 until -e "done"') }) },
      },
      ctx,
    )
    for (let i = 0; i < 1200 && !existsSync(join(s.ws, 'held')); i++) await sleep(50)
    expect(existsSync(join(s.ws, 'held'))).toBe(true)
    const b = await s.tools.call({ id: 'b', type: 'function', function: { name: 'run_command', arguments: JSON.stringify({ command: forks(24, '') }) } }, ctx)
    writeFileSync(join(s.ws, 'done'), '')
    expect(b.output).toBe('exit code 0\nforked 24')
    expect((await a).output).toBe('exit code 0\nforked 24')
  })
})

/**
 * `ctxagent run --allow-shell` with a scripted model that runs every check, one
 * run_command each, as `uid` (0, or an unprivileged user through setpriv); the tool
 * results the model got back, in order.
 */
async function runChecks(uid: number): Promise<{ outputs: string[]; ws: string }> {
  rootSecret()
  const top = realpathSync(mkdtempSync(join(tmpdir(), 'ctxagent-hostile-')))
  onTestFinished(() => rmSync(top, { recursive: true, force: true }))
  chmodSync(top, 0o711)
  const ws = join(top, 'ws')
  const tree = join(top, 'tree')
  mkdirSync(ws)
  mkdirSync(tree)
  const fake = await startFakeLlm()
  const config = join(top, 'config.yaml')
  writeFileSync(config, fake.configYaml(`tools:\n  shell: true\n${LIMITS_YAML}`))
  for (const p of [ws, tree]) chownSync(p, uid === 0 ? SANDBOX_UID : uid, uid === 0 ? SANDBOX_GID : uid)
  // The config is ctxagent's user's: one owned by anyone else is refused (src/config/trust.ts).
  chownSync(config, uid, uid)
  rootOnlyIn(ws)
  fake.queue.push(
    ...CHECKS.map((c, i) => ({ calls: [{ id: `k${i}`, name: 'run_command', arguments: { command: c.command({ tree, config }), timeout_seconds: 120 } }] })),
    { calls: [{ name: 'finish', arguments: { summary: 'probed', status: 'done' } }] },
  )
  const argv = [
    process.execPath,
    join(reachableRoot(), 'bin', 'ctxagent'),
    'run',
    '--task',
    'probe the sandbox',
    '--workspace',
    ws,
    '--home',
    tree,
    '--config',
    config,
  ]
  const command = uid === 0 ? argv : ['setpriv', `--reuid=${uid}`, `--regid=${uid}`, '--clear-groups', '--', ...argv]
  const child = spawn(command[0] as string, command.slice(1), { cwd: ws, env: { ...process.env, ...TEST_ENV, HOME: top }, stdio: ['ignore', 'pipe', 'pipe'] })
  let err = ''
  child.stderr.on('data', (d: Buffer) => (err += d.toString()))
  onTestFinished(() => void child.kill('SIGKILL'))
  const exit = await exitOf(child)
  expect({ code: exit.code, err: exit.code === 0 ? '' : err }).toEqual({ code: 0, err: '' })
  // Each check's result is the newest tool message of the request after its call (older ones get pruned).
  const outputs = fake.requests.slice(1, CHECKS.length + 1).map((r) => r.body.messages.filter((m) => m.role === 'tool').at(-1)?.content ?? '')
  return { outputs, ws }
}

describe.runIf(asRoot)('a hostile model through ctxagent run --allow-shell', () => {
  it('as root: every check holds, commands run as nobody', { timeout: 300_000 }, async () => {
    const { outputs, ws } = await runChecks(0)
    expect(outputs).toHaveLength(CHECKS.length)
    CHECKS.forEach((c, i) => c.expect(outputs[i] ?? '', ws))
  })

  it.runIf(setpriv)('as an unprivileged user (setpriv): every check holds', { timeout: 300_000 }, async () => {
    const uid = 65533
    // The built bundle must be readable by that user, or the test says so rather than failing obscurely.
    expect(
      spawnSync('setpriv', [
        `--reuid=${uid}`,
        `--regid=${uid}`,
        '--clear-groups',
        '--',
        process.execPath,
        join(reachableRoot(), 'bin', 'ctxagent'),
        '--version',
      ]).status,
    ).toBe(0)
    const { outputs, ws } = await runChecks(uid)
    expect(outputs).toHaveLength(CHECKS.length)
    CHECKS.forEach((c, i) => c.expect(outputs[i] ?? '', ws))
    record('hostile-sandbox', { checks_per_identity: CHECKS.length, identities: 'root, uid 65533', refused_syscalls: Object.keys(nr).length - 1 })
  })

  it('refuses --allow-shell when the sandbox user cannot write the workspace (exit 2, one line, nothing written)', () => {
    const top = realpathSync(mkdtempSync(join(tmpdir(), 'ctxagent-hostile-')))
    onTestFinished(() => rmSync(top, { recursive: true, force: true }))
    const ws = join(top, 'ws')
    mkdirSync(ws, { mode: 0o755 })
    chmodSync(top, 0o755)
    const r = spawnSync(
      process.execPath,
      [BIN, 'run', '--task', 't', '--allow-shell', '--provider', 'ollama', '--workspace', ws, '--home', join(top, 'tree')],
      { encoding: 'utf8', env: { ...process.env, ...TEST_ENV } },
    )
    expect(r.stderr).toBe(
      `ctxagent: as root, run_command runs commands as nobody (uid ${SANDBOX_UID}), who cannot write the workspace ${ws} (owner root, mode 755); its parent directories must be searchable by that user too (chown it to the user commands should run as, or set tools.sandbox_user)\n`,
    )
    expect(r.status).toBe(2)
    expect(existsSync(join(top, 'tree'))).toBe(false)
  })
})

describe.runIf(asRoot)('an MCP server started by a run', () => {
  it('runs in the sandbox as the commands do: as nobody, a root-only directory it was given stays unreadable', { timeout: 120_000 }, async () => {
    const s = await runSetup()
    const locked = mkdtempSync(join(tmpdir(), 'ctxagent-locked-'))
    onTestFinished(() => rmSync(locked, { recursive: true, force: true }))
    writeFileSync(join(locked, 'secret.txt'), 'ROOTSECRET for the server\n')
    const server = join(reachableRoot(), 'node_modules', '@modelcontextprotocol', 'server-filesystem', 'dist', 'index.js')
    writeFileSync(
      s.config,
      s.fake.configYaml(
        `mcp:\n  servers:\n    files:\n      command: ${process.execPath}\n      args: [${JSON.stringify(server)}, ${JSON.stringify(s.ws)}, ${JSON.stringify(locked)}]\n      timeout_seconds: 30\n`,
      ),
    )
    s.fake.queue.push(
      { calls: [{ name: 'files__read_text_file', arguments: { path: join(locked, 'secret.txt') } }] },
      { calls: [{ name: 'files__write_file', arguments: { path: join(s.ws, 'by-server.txt'), content: 'written\n' } }] },
      { content: 'done' },
    )
    const res = await s.run(['run', '--task', 't', '--workspace', s.ws])
    expect(res.code, res.stderr).toBe(0)
    const task = onlyTask(s.tree)
    expect(task.tools.map((t) => [t.tool_name, t.status])).toEqual([
      ['files__read_text_file', 'error'],
      ['files__write_file', 'success'],
    ])
    expect(JSON.stringify(s.fake.requests)).not.toContain('ROOTSECRET')
    // The server wrote as nobody, not as root (the run is root).
    expect(statSync(join(s.ws, 'by-server.txt')).uid).toBe(SANDBOX_UID)
  })
})
