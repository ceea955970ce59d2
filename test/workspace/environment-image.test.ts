import { spawn, spawnSync } from 'node:child_process'
import { chmodSync, chownSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, realpathSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, expect, it, onTestFinished } from 'vitest'
import { startFakeLlm } from '../helpers/fake-llm.js'
import { reachableRoot } from '../helpers/reachable.js'
import { TEST_ENV } from '../helpers/run.js'
import { SANDBOX_GID, SANDBOX_UID } from '../helpers/sandbox-owner.js'
import { exitOf } from '../helpers/wait.js'
import { onlyTask, readTask, runSetup, waitFor } from '../run/harness.js'
import { busyboxRoot, dockerSave, ociLayout, tarOf, tarOfDir } from './image-fixture.js'
import { git, makeOrigin } from './repo.js'

/*
 * An environment with an image through the real `ctxagent run` (docs/environments.md#an-image),
 * as root and as an unprivileged user: setup (behind the egress proxy, whose forwarder is
 * the host's node shown apart), maintenance, the agent's commands and the test command
 * all run in a busybox image the test builds, with the host's /usr absent.
 */

/** The repository's test command: busybox's sh, the image's tool, none of the host's files, and what setup made. */
const CHECK = [
  'set -e',
  'echo "shell: $(readlink /proc/$$/exe)"',
  '[ "$(readlink /proc/$$/exe)" = /bin/busybox ]',
  'for host_only in /usr/bin/git /usr/lib/postgresql /usr/bin/node; do if [ -e "$host_only" ]; then echo "HOST FILE $host_only"; exit 1; fi; done',
  'image-tool',
  'cat deps/made-by maintained.txt',
  'echo "proxy said: $(cat deps/proxy-said)"',
  'echo CHECK-PASSED',
  '',
].join('\n')

const SETUP = [
  'mkdir -p deps',
  'image-tool > deps/made-by',
  // Through the forwarder to the egress proxy, which refuses a host setup_hosts does not list.
  'wget -q -O- http://not-listed.test/ > deps/proxy-said 2>&1 || true',
]

function envFile(image: string): string {
  return [
    `image: ${image}`,
    'setup: |',
    ...SETUP.map((l) => `  ${l}`),
    'setup_hosts: [registry.listed.test]',
    'cache:',
    '  paths: [deps]',
    'maintenance: echo "maintenance ran in $(readlink /proc/$$/exe)" > maintained.txt',
    'test: sh ./check.sh',
    '',
  ].join('\n')
}

/** A directory for the test, searchable by every user (the sandbox's and the test's unprivileged one). */
function top(): string {
  const dir = realpathSync(mkdtempSync(join(tmpdir(), 'ctxagent-envimage-')))
  onTestFinished(() => rmSync(dir, { recursive: true, force: true }))
  chmodSync(dir, 0o711)
  return dir
}

function image(dir: string): string {
  const root = busyboxRoot(join(dir, 'rootfs'))
  return ociLayout(join(dir, 'oci'), [
    { tar: tarOfDir(root), gzip: true },
    { tar: tarOf([{ name: 'usr/bin/.wh.nothing-here' }, { name: 'usr/share/image-note', data: 'second layer\n' }]), gzip: false },
  ])
}

async function imageRun(uid: number) {
  const dir = top()
  const origin = makeOrigin({ 'check.sh': CHECK, '.ctxagent/environment.yml': envFile(image(dir)) })
  const ws = join(dir, 'ws')
  git(dir, 'clone', '--quiet', origin.bare, ws)
  const tree = join(dir, 'tree')
  mkdirSync(tree)
  spawnSync('chown', ['-R', `${uid === 0 ? SANDBOX_UID : uid}:${uid === 0 ? SANDBOX_GID : uid}`, ws])
  chownSync(tree, uid, uid)
  const fake = await startFakeLlm()
  const config = join(dir, 'config.yaml')
  writeFileSync(config, fake.configYaml('tools:\n  shell: true\n'), { mode: 0o600 })
  chownSync(config, uid, uid)
  fake.queue.push(
    { calls: [{ name: 'run_command', arguments: { command: 'sh ./check.sh; echo "agent-exit=$?"; ls /usr/share', timeout_seconds: 120 } }] },
    { calls: [{ name: 'finish', arguments: { summary: 'checked', status: 'done' } }] },
  )
  const argv = [process.execPath, join(reachableRoot(), 'bin', 'ctxagent'), 'run', '--task', 'check', '--workspace', ws, '--home', tree, '--config', config]
  const command = uid === 0 ? argv : ['setpriv', `--reuid=${uid}`, `--regid=${uid}`, '--clear-groups', '--', ...argv]
  const child = spawn(command[0] as string, command.slice(1), { cwd: dir, env: { ...process.env, ...TEST_ENV, HOME: dir }, stdio: ['ignore', 'pipe', 'pipe'] })
  let err = ''
  child.stderr.on('data', (d: Buffer) => (err += d.toString()))
  onTestFinished(() => void child.kill('SIGKILL'))
  const exit = await exitOf(child)
  expect({ code: exit.code, err: exit.code === 0 ? '' : err }).toEqual({ code: 0, err: '' })
  const [uuid = ''] = readdirSync(join(tree, 'completed'), { recursive: true })
    .map(String)
    .filter((p) => /[0-9a-f-]{36}$/.test(p))
  const task = join(tree, 'completed', uuid)
  const state = JSON.parse(readFileSync(join(task, 'state.json'), 'utf8')) as Record<string, { [k: string]: unknown }>
  const agent = fake.requests[1]?.body.messages.filter((m) => m.role === 'tool').at(-1)?.content ?? ''
  return { state, agent: String(agent), log: readFileSync(join(task, 'setup.log'), 'utf8'), first: JSON.stringify(fake.requests[0]?.body.messages ?? []) }
}

function expectInImage(r: Awaited<ReturnType<typeof imageRun>>): void {
  expect(r.state.environment).toMatchObject({
    status: 'ready',
    cache: 'miss',
    image: { kind: 'oci', cache: 'miss', digest: expect.stringMatching(/^sha256:/) },
  })
  // The agent's command ran in the image: busybox's sh, the image's tool and second layer, none of the host's files.
  expect(r.agent).toContain('shell: /bin/busybox')
  expect(r.agent).toContain('image-tool from the image')
  expect(r.agent).toContain('maintenance ran in /bin/busybox')
  expect(r.agent).toContain('agent-exit=0')
  expect(r.agent).toContain('image-note')
  // Setup ran in it too, and its network went through the forwarder to the proxy, which refused the unlisted host.
  expect(r.agent).toMatch(/proxy said: .*403/)
  expect(r.first).toContain("Commands run in the repository's own image")
  // ctxagent's own run of the test command, after the agent: in the image, passing.
  expect(r.state.test_run).toMatchObject({ command: 'sh ./check.sh', exit_code: 0 })
  expect(String(r.state.test_run?.tail)).toContain('CHECK-PASSED')
}

const asRoot = process.getuid?.() === 0
const setpriv = spawnSync('setpriv', ['--version']).status === 0

describe.runIf(asRoot)('an environment with an image, through ctxagent run', () => {
  it('as root (commands as nobody)', { timeout: 240_000 }, async () => {
    expectInImage(await imageRun(0))
  })

  it.runIf(setpriv)('as an unprivileged user (setpriv)', { timeout: 240_000 }, async () => {
    expectInImage(await imageRun(65533))
  })

  it('two `env prepare` at once unpack a docker save archive once; doctor reads the image', { timeout: 240_000 }, async () => {
    const dir = top()
    const archive = dockerSave(join(dir, 'image.tar'), [tarOfDir(busyboxRoot(join(dir, 'rootfs')))], dir)
    const origin = makeOrigin({ 'check.sh': CHECK, '.ctxagent/environment.yml': envFile(archive) })
    const ws = join(dir, 'ws')
    git(dir, 'clone', '--quiet', origin.bare, ws)
    spawnSync('chown', ['-R', `${SANDBOX_UID}:${SANDBOX_GID}`, ws])
    const tree = join(dir, 'tree')
    mkdirSync(tree)
    const config = join(dir, 'config.yaml')
    writeFileSync(config, 'tools:\n  shell: true\n', { mode: 0o600 })
    const cli = (...args: string[]) =>
      spawn(process.execPath, [join(reachableRoot(), 'bin', 'ctxagent'), ...args, '--home', tree, '--config', config], {
        cwd: dir,
        env: { ...process.env, ...TEST_ENV, HOME: dir },
        stdio: ['ignore', 'pipe', 'pipe'],
      })
    const outputs = await Promise.all(
      [0, 1].map(async () => {
        const child = cli('env', 'prepare', '--workspace', ws, '--json')
        let out = ''
        child.stdout.on('data', (d: Buffer) => (out += d.toString()))
        onTestFinished(() => void child.kill('SIGKILL'))
        const exit = await exitOf(child)
        expect(exit.code).toBe(0)
        return JSON.parse(out) as { image: { cache: string; kind: string } }
      }),
    )
    expect(outputs.map((o) => o.image.cache).sort()).toEqual(['hit', 'miss'])
    expect(outputs[0]?.image.kind).toBe('docker-save')
    const doctor = cli('doctor', '--workspace', ws)
    let said = ''
    doctor.stdout.on('data', (d: Buffer) => (said += d.toString()))
    await exitOf(doctor)
    expect(said).toMatch(/image .*image\.tar \(docker-save sha256:[0-9a-f]{12}/)
  })

  it('a resumed task goes on in the image it started with', { timeout: 240_000 }, async () => {
    const s = await runSetup()
    // The cache (in the task tree's home) must be reachable by the sandbox's user: the docs say so, the test does it.
    chmodSync(s.tree.base, 0o711)
    const dir = top()
    mkdirSync(join(s.ws, '.ctxagent'))
    writeFileSync(join(s.ws, '.ctxagent', 'environment.yml'), `image: ${image(dir)}\ntest: sh ./check.sh\n`)
    const probe = 'echo "shell: $(readlink /proc/$$/exe)"; [ -e /usr/bin/git ] && echo HOST-GIT || echo no-host-git'
    s.fake.queue.push({ calls: [{ name: 'run_command', arguments: { command: probe } }] }, { delayMs: 60_000, content: 'never' })
    const started = s.start(['run', '--task', 't', '--workspace', s.ws, '--allow-shell'])
    await waitFor('the second LLM request', () => s.fake.requests.length >= 2)
    started.child.kill('SIGINT')
    await exitOf(started.child)
    const paused = onlyTask(s.tree)
    expect(paused.location).toBe('paused')
    expect(paused.state.environment).toMatchObject({ image: { kind: 'oci', cache: 'miss' } })
    s.fake.queue.push(
      { calls: [{ name: 'run_command', arguments: { command: probe } }] },
      { calls: [{ name: 'finish', arguments: { summary: 'done', status: 'done' } }] },
    )
    const resumed = await s.run(['run', '--resume', paused.uuid])
    expect(resumed.code, resumed.stderr).toBe(0)
    const outputs = readTask(s.tree, paused.uuid)
      .messages.filter((m) => m.role === 'tool')
      .map((m) => JSON.stringify(m))
      .filter((text) => text.includes('shell:'))
    // The command before the pause and the one after the resume.
    expect(outputs).toHaveLength(2)
    for (const out of outputs) {
      expect(out).toContain('shell: /bin/busybox')
      expect(out).toContain('no-host-git')
    }
  })
})
