import { spawn, spawnSync } from 'node:child_process'
import type { ChildProcess } from 'node:child_process'
import { chmodSync, chownSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, realpathSync, rmSync, writeFileSync } from 'node:fs'
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest'
import { startFakeLlm } from '../helpers/fake-llm.js'
import type { FakeLlm } from '../helpers/fake-llm.js'
import { BIN, TEST_ENV } from '../helpers/run.js'
import { SANDBOX_GID, SANDBOX_UID } from '../helpers/sandbox-owner.js'
import { exitOf } from '../helpers/wait.js'
import { jsonl } from '../run/harness.js'
import { record } from './report.js'
import { reachableRoot } from '../helpers/reachable.js'

/*
 * Issue #36: a hostile command with network: proxy (docs/security.md#the-network),
 * through a real `ctxagent run --allow-shell` against the fake LLM. The "internet" is a
 * server in a network namespace of the test's own, at the far end of a veth pair in a
 * private /30 the test makes; ctxagent runs in a mount namespace of its own whose
 * /etc/hosts (bound over the real one, which nothing else sees changed) names that
 * server pkg.ctxagent-test, a name for loopback and one for this host's end of the
 * pair. The server's private address is let through the way an operator lets a LAN
 * mirror through: tools.allowed_networks, its /32. Needs root (namespaces, mounts)
 * and iproute2; without them the suite is skipped, and says why in its name.
 */

const asRoot = process.getuid?.() === 0
const tools = spawnSync('ip', ['-V']).status === 0 && spawnSync('unshare', ['--version']).status === 0
const ready = asRoot && tools
const why = ready ? '' : ' (skipped: needs root and iproute2/unshare to make a network namespace)'

// A /30 of 10.213.0.0/16 from this process's id: two runs at once on one machine do not meet.
const third = (process.pid >> 6) & 255
const fourth = (process.pid & 63) * 4
const HOST_END = `10.213.${third}.${fourth + 1}`
const FAR_END = `10.213.${third}.${fourth + 2}`
const NS = `ctxa-net-${process.pid}`
const VETH = `cxa${process.pid}`

/** The probe a command runs inside the sandbox: node, honouring HTTP_PROXY as curl or npm would. */
const PROBE = String.raw`
const http = require('http'), net = require('net')
const [mode, target] = process.argv.slice(2)
const proxy = new URL(process.env.HTTP_PROXY || 'http://127.0.0.1:1')
const say = (...w) => console.log([mode, target, ...w].join(' '))
const collect = (s, done) => { let b = ''; s.on('data', (d) => (b += d)); s.on('end', () => done(b)) }
if (mode === 'get') {
  http.get({ host: proxy.hostname, port: proxy.port, path: 'http://' + target + '/hello', headers: { host: target } }, (res) => collect(res, (b) => say(res.statusCode, b.trim())))
    .on('error', (e) => say('error', e.code))
} else if (mode === 'connect') {
  const req = http.request({ host: proxy.hostname, port: proxy.port, method: 'CONNECT', path: target })
  req.on('connect', (res, sock, head) => {
    if (res.statusCode !== 200) return collect(sock, (b) => say(res.statusCode, (head.toString() + b).trim()))
    sock.write('GET /tunnel HTTP/1.1\r\nHost: ' + target + '\r\nConnection: close\r\n\r\n')
    collect(sock, (b) => say(200, b.split('\r\n\r\n')[1]))
  })
  req.on('error', (e) => say('error', e.code))
  req.end()
} else if (mode === 'direct') {
  http.get('http://' + target + '/direct', (res) => collect(res, (b) => say(res.statusCode, b.trim()))).on('error', (e) => say('error', e.code))
} else if (mode === 'raw') {
  const [h, p] = target.split(':')
  const s = net.connect(Number(p), h)
  s.setTimeout(5000, () => (say('error', 'TIMEOUT'), s.destroy()))
  s.on('connect', () => (say('connected'), s.destroy()))
  s.on('error', (e) => say('error', e.code))
}
`

const ip = (...args: string[]) => {
  const r = spawnSync('ip', args, { encoding: 'utf8' })
  if (r.status !== 0) throw new Error(`ip ${args.join(' ')}: ${r.stderr.trim()}`)
}

let server: ChildProcess | null = null
let port = 0
const served: string[] = []

/** The namespace, the veth pair and the server at its far end; its port once it listens. */
async function makeNetwork(): Promise<void> {
  ip('netns', 'add', NS)
  ip('link', 'add', `${VETH}h`, 'type', 'veth', 'peer', 'name', `${VETH}n`)
  ip('link', 'set', `${VETH}n`, 'netns', NS)
  ip('addr', 'add', `${HOST_END}/30`, 'dev', `${VETH}h`)
  ip('link', 'set', `${VETH}h`, 'up')
  ip('netns', 'exec', NS, 'ip', 'addr', 'add', `${FAR_END}/30`, 'dev', `${VETH}n`)
  ip('netns', 'exec', NS, 'ip', 'link', 'set', `${VETH}n`, 'up')
  ip('netns', 'exec', NS, 'ip', 'link', 'set', 'lo', 'up')
  const code =
    "const s = require('http').createServer((q, r) => { console.log(q.method + ' ' + q.url); r.end('ns-server ' + q.method + ' ' + q.url + ' host=' + q.headers.host) }); s.listen(0, process.argv[1], () => console.log('port ' + s.address().port))"
  server = spawn('ip', ['netns', 'exec', NS, process.execPath, '-e', code, FAR_END], { stdio: ['ignore', 'pipe', 'inherit'] })
  port = await new Promise<number>((resolve, reject) => {
    let out = ''
    server?.stdout?.on('data', (d: Buffer) => {
      out += d.toString()
      const lines = out.split('\n')
      out = lines.pop() ?? ''
      for (const line of lines) {
        const m = /^port (\d+)$/.exec(line)
        if (m) resolve(Number(m[1]))
        else served.push(line)
      }
    })
    server?.once('exit', (c) => reject(new Error(`the namespace's server exited (${c})`)))
  })
}

function removeNetwork(): void {
  server?.kill('SIGKILL')
  // Deleting the namespace deletes the pair's far end, and with it the near one.
  spawnSync('ip', ['netns', 'del', NS])
  spawnSync('ip', ['link', 'del', `${VETH}h`])
}

/** A workspace with the probe, a tree and a hosts file, as a run as root would have them. */
function place(): { top: string; ws: string; tree: string; hosts: string } {
  const top = realpathSync(mkdtempSync(join(tmpdir(), 'ctxagent-net-')))
  onTestFinished(() => rmSync(top, { recursive: true, force: true }))
  chmodSync(top, 0o711)
  const ws = join(top, 'ws')
  const tree = join(top, 'tree')
  mkdirSync(ws)
  mkdirSync(tree)
  writeFileSync(join(ws, 'probe.cjs'), PROBE, { mode: 0o644 })
  chownSync(ws, SANDBOX_UID, SANDBOX_GID)
  const hosts = join(top, 'hosts')
  writeFileSync(hosts, `127.0.0.1 localhost\n${FAR_END} pkg.ctxagent-test other.ctxagent-test\n127.0.0.1 loop.ctxagent-test\n${HOST_END} lan.ctxagent-test\n`, {
    mode: 0o644,
  })
  return { top, ws, tree, hosts }
}

/**
 * `ctxagent run --allow-shell` in a mount namespace whose /etc/hosts is `hosts`, the
 * model running each of `commands` with run_command, then finishing; the tool results
 * it got back, in order, and the task's tools.jsonl.
 */
async function runCommands(
  fake: FakeLlm,
  at: ReturnType<typeof place>,
  toolsYaml: string,
  commands: (string | { tool: string; arguments: Record<string, unknown> })[],
  uid = 0,
): Promise<{ outputs: string[]; tools: Record<string, unknown>[]; state: Record<string, unknown> }> {
  const config = join(at.top, 'config.yaml')
  writeFileSync(config, fake.configYaml(toolsYaml), { mode: 0o600 })
  // Not root: the run is that user's, and so are its tree, config and workspace (commands run as it).
  const drop = uid === 0 ? '' : `setpriv --reuid=${uid} --regid=${uid} --clear-groups -- `
  if (uid !== 0) for (const p of [config, at.tree, at.ws]) chownSync(p, uid, uid)
  fake.queue.push(
    ...commands.map((c, i) => ({
      calls: [
        typeof c === 'string'
          ? { id: `c${i}`, name: 'run_command', arguments: { command: c, timeout_seconds: 60 } }
          : { id: `c${i}`, name: c.tool, arguments: c.arguments },
      ],
    })),
    { calls: [{ name: 'finish', arguments: { summary: 'probed', status: 'done' } }] },
  )
  const argv = [
    process.execPath,
    join(reachableRoot(), 'bin', 'ctxagent'),
    'run',
    '--task',
    'probe the network',
    '--workspace',
    at.ws,
    '--home',
    at.tree,
    '--config',
    config,
  ]
  const child = spawn(
    'unshare',
    ['--mount', '--propagation', 'private', '--', 'sh', '-c', `mount --bind "$0" /etc/hosts && exec ${drop}"$@"`, at.hosts, ...argv],
    { cwd: at.ws, env: { ...process.env, ...TEST_ENV, HOME: at.top }, stdio: ['ignore', 'pipe', 'pipe'] },
  )
  let err = ''
  child.stderr.on('data', (d: Buffer) => (err += d.toString()))
  onTestFinished(() => void child.kill('SIGKILL'))
  const exit = await exitOf(child)
  expect({ code: exit.code, err: exit.code === 0 ? '' : err }).toEqual({ code: 0, err: '' })
  const outputs = fake.requests.slice(1, commands.length + 1).map((r) => r.body.messages.filter((m) => m.role === 'tool').at(-1)?.content ?? '')
  const completed = join(at.tree, 'completed')
  const dir = readdirSync(completed, { recursive: true, withFileTypes: true }).find((e) => e.isFile() && e.name === 'tools.jsonl')
  if (dir === undefined) throw new Error('no tools.jsonl under completed/')
  const tools = jsonl(join(dir.parentPath, 'tools.jsonl'))
  const state = JSON.parse(readFileSync(join(dir.parentPath, 'state.json'), 'utf8')) as Record<string, unknown>
  return { outputs, tools, state }
}

describe.runIf(ready)(`network: proxy, through ctxagent run --allow-shell${why}`, () => {
  beforeAll(makeNetwork, 60_000)
  afterAll(removeNetwork)

  it('reaches an allowed host by name through the proxy, and nothing else: not an unlisted host, not loopback by number or by name, not this host, not a raw socket', {
    timeout: 300_000,
  }, async () => {
    const at = place()
    const fake = await startFakeLlm()
    const llmPort = Number(new URL(fake.url).port)
    const pkg = `pkg.ctxagent-test:${port}`
    const yaml = `tools:\n  shell: true\n  network: proxy\n  allowed_hosts: [pkg.ctxagent-test, loop.ctxagent-test, lan.ctxagent-test, 127.0.0.1]\n  allowed_networks: [${FAR_END}/32, ${HOST_END}/32]\n`
    const { outputs, tools, state } = await runCommands(fake, at, yaml, [
      `echo "proxy=$HTTP_PROXY"; node probe.cjs get ${pkg}`,
      `node probe.cjs connect ${pkg}`,
      `node probe.cjs get other.ctxagent-test:${port}`,
      `node probe.cjs connect 127.0.0.1:${llmPort}`,
      `node probe.cjs connect loop.ctxagent-test:${llmPort}`,
      `node probe.cjs connect lan.ctxagent-test:${llmPort}`,
      `node probe.cjs raw ${FAR_END}:${port}; node probe.cjs raw 127.0.0.1:${llmPort}; node probe.cjs raw ${HOST_END}:${llmPort}`,
    ])
    expect(outputs[0]).toContain('proxy=http://127.0.0.1:3128')
    expect(outputs[0]).toContain(`get ${pkg} 200 ns-server GET /hello host=${pkg}`)
    expect(outputs[1]).toContain(`connect ${pkg} 200 ns-server GET /tunnel host=${pkg}`)
    expect(outputs[2]).toContain(`get other.ctxagent-test:${port} 403 ctxagent egress proxy: refused: other.ctxagent-test is not in tools.allowed_hosts`)
    expect(outputs[3]).toContain(`connect 127.0.0.1:${llmPort} 403 ctxagent egress proxy: refused: 127.0.0.1 is a loopback (127.0.0.0/8) address`)
    expect(outputs[4]).toContain(
      `connect loop.ctxagent-test:${llmPort} 403 ctxagent egress proxy: refused: loop.ctxagent-test resolves to 127.0.0.1, a loopback (127.0.0.0/8) address`,
    )
    expect(outputs[5]).toContain(
      `connect lan.ctxagent-test:${llmPort} 403 ctxagent egress proxy: refused: lan.ctxagent-test resolves to ${HOST_END}, an address of this host`,
    )
    // No route out of the sandbox's own namespace; its loopback is its own (the fake LLM is not there).
    expect(outputs[6]).toMatch(new RegExp(`^raw ${FAR_END.replace(/\./g, '\\.')}:${port} error (ENETUNREACH|EHOSTUNREACH)$`, 'm'))
    expect(outputs[6]).toMatch(new RegExp(`^raw 127\\.0\\.0\\.1:${llmPort} error ECONNREFUSED$`, 'm'))
    expect(outputs[6]).toMatch(new RegExp(`^raw ${HOST_END.replace(/\./g, '\\.')}:${llmPort} error (ENETUNREACH|EHOSTUNREACH)$`, 'm'))
    // The server saw the two allowed requests and nothing else.
    expect(served).toEqual(['GET /hello', 'GET /tunnel'])
    // Every connection is in tools.jsonl beside the calls, which keep their count.
    const network = tools.filter((t) => t.kind === 'network')
    expect(network.map((t) => [(t.arguments as { method: string }).method, (t.arguments as { host: string }).host, t.status])).toEqual([
      ['GET', 'pkg.ctxagent-test', 'success'],
      ['CONNECT', 'pkg.ctxagent-test', 'success'],
      ['GET', 'other.ctxagent-test', 'error'],
      ['CONNECT', '127.0.0.1', 'error'],
      ['CONNECT', 'loop.ctxagent-test', 'error'],
      ['CONNECT', 'lan.ctxagent-test', 'error'],
    ])
    for (const t of network.slice(0, 2))
      expect(t.result).toMatchObject({ allowed: true, address: FAR_END, bytes_up: expect.any(Number), bytes_down: expect.any(Number) })
    expect((network[0]?.result as { bytes_down: number }).bytes_down).toBeGreaterThan(50)
    expect(network[3]).toMatchObject({
      tool_name: 'network',
      error: '127.0.0.1 is a loopback (127.0.0.0/8) address',
      arguments: { by: 'run_command', port: llmPort },
    })
    const calls = tools.filter((t) => t.kind !== 'network')
    expect(calls.map((t) => t.seq)).toEqual(calls.map((_, i) => i + 1))
    // A network record carries the seq of the call before it: the first came while call 1 ran.
    expect(network.map((t) => t.seq)).toEqual([0, 1, 2, 3, 4, 5])
    expect(state.tool_call_count).toBe(calls.length)
    record('hostile-network', { proxied_allowed: 2, proxied_refused: 4, raw_refused: 3 })
  })

  it('an MCP server with network: proxy gets a proxy of its own, with its own allowed_hosts, logged as mcp:<server>', { timeout: 300_000 }, async () => {
    const at = place()
    const fake = await startFakeLlm()
    const pkg = `pkg.ctxagent-test:${port}`
    const server = join(reachableRoot(), 'test', 'helpers', 'hostile-mcp.mjs')
    const yaml = `tools:\n  allowed_hosts: [other.ctxagent-test]\n  allowed_networks: [${FAR_END}/32]\nmcp:\n  servers:\n    net:\n      command: ${process.execPath}\n      args: [${JSON.stringify(server)}, fetch]\n      network: proxy\n      allowed_hosts: [pkg.ctxagent-test]\n      timeout_seconds: 30\n`
    const before = served.length
    const { outputs, tools } = await runCommands(fake, at, yaml, [
      { tool: 'net__fetch', arguments: { target: pkg } },
      { tool: 'net__fetch', arguments: { target: `other.ctxagent-test:${port}` } },
    ])
    expect(outputs[0]).toBe(`fetch ${pkg} 200 ns-server GET /mcp host=${pkg}`)
    // The server's own list replaces tools.allowed_hosts.
    expect(outputs[1]).toBe(`fetch other.ctxagent-test:${port} 403 ctxagent egress proxy: refused: other.ctxagent-test is not in tools.allowed_hosts`)
    expect(served.slice(before)).toEqual(['GET /mcp'])
    expect(
      tools.filter((t) => t.kind === 'network').map((t) => [(t.arguments as { by: string }).by, (t.arguments as { host: string }).host, t.status]),
    ).toEqual([
      ['mcp:net', 'pkg.ctxagent-test', 'success'],
      ['mcp:net', 'other.ctxagent-test', 'error'],
    ])
  })

  it.runIf(spawnSync('setpriv', ['--version']).status === 0)('as an unprivileged user (setpriv) the proxy works the same', { timeout: 300_000 }, async () => {
    const uid = 65533
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
    const at = place()
    const fake = await startFakeLlm()
    const llmPort = Number(new URL(fake.url).port)
    const pkg = `pkg.ctxagent-test:${port}`
    const yaml = `tools:\n  shell: true\n  network: true\n  allowed_networks: [${FAR_END}/32]\n`
    const { outputs, tools } = await runCommands(
      fake,
      at,
      yaml,
      [`id -u; node probe.cjs get ${pkg}; node probe.cjs connect loop.ctxagent-test:${llmPort}`],
      uid,
    )
    expect(outputs[0]).toMatch(new RegExp(`^${uid}$`, 'm'))
    expect(outputs[0]).toContain(`get ${pkg} 200 ns-server GET /hello host=${pkg}`)
    expect(outputs[0]).toContain(
      `connect loop.ctxagent-test:${llmPort} 403 ctxagent egress proxy: refused: loop.ctxagent-test resolves to 127.0.0.1, a loopback (127.0.0.0/8) address`,
    )
    expect(tools.filter((t) => t.kind === 'network').map((t) => t.status)).toEqual(['success', 'error'])
  })

  it('npm and git find the proxy through the variables set for them', { timeout: 300_000 }, async () => {
    const at = place()
    const fake = await startFakeLlm()
    const base = `http://pkg.ctxagent-test:${port}`
    const before = served.length
    await runCommands(fake, at, `tools:\n  shell: true\n  network: proxy\n  allowed_networks: [${FAR_END}/32]\n`, [
      `npm view probe-pkg --registry ${base}/ --fetch-retries=0 --json; git ls-remote ${base}/repo.git; true`,
    ])
    // Neither gets an answer it understands; both asked the right server through the proxy.
    expect(served.slice(before)).toEqual(expect.arrayContaining(['GET /probe-pkg', 'GET /repo.git/info/refs?service=git-upload-pack']))
  })

  it('without the proxy (network: none) the same commands reach nothing', { timeout: 300_000 }, async () => {
    const at = place()
    const fake = await startFakeLlm()
    const { outputs, tools } = await runCommands(fake, at, `tools:\n  shell: true\n  allowed_networks: [${FAR_END}/32]\n`, [
      `echo "proxy=$HTTP_PROXY"; node probe.cjs raw 127.0.0.1:3128; node probe.cjs raw ${FAR_END}:${port}`,
    ])
    expect(outputs[0]).toMatch(/^proxy=$/m)
    expect(outputs[0]).toMatch(/^raw 127\.0\.0\.1:3128 error ECONNREFUSED$/m)
    expect(outputs[0]).toMatch(/error (ENETUNREACH|EHOSTUNREACH)$/m)
    expect(tools.filter((t) => t.kind === 'network')).toEqual([])
  })
})

describe.runIf(asRoot)(`network: host${asRoot ? '' : ' (skipped: needs root)'}`, () => {
  it("shares the host network: a command reaches a service on this host's loopback, and doctor warns of it", { timeout: 300_000 }, async () => {
    const local = createServer((_q, r) => r.end('a local service'))
    await new Promise<void>((resolve) => local.listen(0, '127.0.0.1', resolve))
    onTestFinished(() => void local.close())
    const localPort = (local.address() as AddressInfo).port
    const at = place()
    const fake = await startFakeLlm()
    const yaml = 'tools:\n  shell: true\n  network: host\n'
    const { outputs } = await runCommands(fake, at, yaml, [`node probe.cjs direct 127.0.0.1:${localPort}`])
    expect(outputs[0]).toContain(`direct 127.0.0.1:${localPort} 200 a local service`)
    const doctor = spawnSync(process.execPath, [BIN, 'doctor', '--json', '--home', at.tree, '--config', join(at.top, 'config.yaml'), '--timeout', '10s'], {
      encoding: 'utf8',
      env: { ...process.env, ...TEST_ENV, HOME: at.top },
    })
    const checks = JSON.parse(doctor.stdout) as
      | { checks?: { name: string; status: string; message: string }[] }
      | { name: string; status: string; message: string }[]
    const list = Array.isArray(checks) ? checks : (checks.checks ?? [])
    expect(list.find((c) => c.name === 'network')).toEqual(
      expect.objectContaining({
        status: 'warn',
        message: expect.stringContaining("tools.network: host — commands share this host's network and reach its local services (serve, PostgreSQL"),
      }),
    )
  })
})
