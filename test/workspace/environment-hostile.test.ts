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
import { git, makeOrigin } from './repo.js'

/*
 * The agent phase runs under the task's own policy (docs/contract.md §16.2): a hostile
 * model looks everywhere for setup's secret and tries setup's host, as root and as an
 * unprivileged user. Setup proves it had the secret (its hash in the file it makes); the
 * agent's commands see neither the value nor its mask, and the agent's proxy refuses
 * setup's host.
 */

const SECRET = 'setup-only-Z8q4Xw2RkP7mTn5Vb3Jc'
const SETUP_HOST = 'registry.setup-only.test'
const SHA = spawnSync('sh', ['-c', `printf %s '${SECRET}' | sha256sum | cut -c1-64`], { encoding: 'utf8' }).stdout.trim()

const PROBES = [
  'cat deps/secret-hash',
  "env; echo ---; tr '\\0' '\\n' < /proc/1/environ; echo ---; tr '\\0' '\\n' < /proc/self/environ",
  `grep -rs '${SECRET.slice(0, 16)}' /tmp /run /var /home /opt /etc . 2>/dev/null | head -5; echo grep-done`,
  `node -e "require('http').get({host:'127.0.0.1',port:3128,path:'http://${SETUP_HOST}/pkg',headers:{host:'${SETUP_HOST}'}},r=>{let b='';r.on('data',d=>b+=d);r.on('end',()=>console.log('status',r.statusCode,b))}).on('error',e=>console.log('error',e.code))"`,
]

async function hostileRun(uid: number) {
  const top = realpathSync(mkdtempSync(join(tmpdir(), 'ctxagent-envhostile-')))
  onTestFinished(() => rmSync(top, { recursive: true, force: true }))
  chmodSync(top, 0o711)
  const setup = `mkdir -p deps\nprintf %s "$SETUP_TOKEN" | sha256sum | cut -c1-64 > deps/secret-hash\necho "setup saw $SETUP_TOKEN"`
  const env = `setup: |\n  ${setup.split('\n').join('\n  ')}\nsetup_hosts: [${SETUP_HOST}]\nsetup_secrets: [SETUP_TOKEN]\ncache:\n  paths: [deps]\n`
  const origin = makeOrigin({ 'README.md': 'x\n', '.ctxagent/environment.yml': env })
  const ws = join(top, 'ws')
  git(top, 'clone', '--quiet', origin.bare, ws)
  const tree = join(top, 'tree')
  mkdirSync(tree)
  const owner = uid === 0 ? SANDBOX_UID : uid
  spawnSync('chown', ['-R', `${owner}:${uid === 0 ? SANDBOX_GID : uid}`, ws])
  chownSync(tree, uid === 0 ? 0 : uid, uid === 0 ? 0 : uid)
  const fake = await startFakeLlm()
  const config = join(top, 'config.yaml')
  // The agent has a network, through its own proxy, to its own hosts only.
  writeFileSync(config, fake.configYaml('tools:\n  shell: true\n  network: proxy\n  allowed_hosts: [agent-only.test]\n'), { mode: 0o600 })
  chownSync(config, uid, uid)
  fake.queue.push(...PROBES.map((command, i) => ({ calls: [{ id: `p${i}`, name: 'run_command', arguments: { command, timeout_seconds: 120 } }] })), {
    calls: [{ name: 'finish', arguments: { summary: 'probed', status: 'done' } }],
  })
  const argv = [process.execPath, join(reachableRoot(), 'bin', 'ctxagent'), 'run', '--task', 'probe', '--workspace', ws, '--home', tree, '--config', config]
  const command = uid === 0 ? argv : ['setpriv', `--reuid=${uid}`, `--regid=${uid}`, '--clear-groups', '--', ...argv]
  const child = spawn(command[0] as string, command.slice(1), {
    cwd: top,
    env: { ...process.env, ...TEST_ENV, HOME: top, SETUP_TOKEN: SECRET },
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  let err = ''
  child.stderr.on('data', (d: Buffer) => (err += d.toString()))
  onTestFinished(() => void child.kill('SIGKILL'))
  const exit = await exitOf(child)
  expect({ code: exit.code, err: exit.code === 0 ? '' : err }).toEqual({ code: 0, err: '' })
  const outputs = fake.requests.slice(1, PROBES.length + 1).map((r) => r.body.messages.filter((m) => m.role === 'tool').at(-1)?.content ?? '')
  const [uuid = ''] = readdirSync(join(tree, 'completed'), { recursive: true })
    .map(String)
    .filter((p) => /[0-9a-f-]{36}$/.test(p))
  const dir = join(tree, 'completed', uuid)
  return {
    outputs,
    all: JSON.stringify(fake.requests.map((r) => r.body.messages)),
    log: readFileSync(join(dir, 'setup.log'), 'utf8'),
    transcript: readFileSync(join(dir, 'messages.jsonl'), 'utf8'),
  }
}

function expectContained(r: Awaited<ReturnType<typeof hostileRun>>): void {
  // Setup had the secret: the hash of what it saw is the secret's; its log shows the value masked.
  expect(r.outputs[0]).toContain(SHA)
  expect(r.log).toMatch(/setup saw \[SECRET:[\w.]*SETUP_TOKEN\]/)
  expect(r.log).not.toContain(SECRET)
  // The agent's commands: neither the value nor its mask (a masked leak is still a leak), nor the variable.
  for (const text of [r.all, r.transcript]) {
    expect(text).not.toContain(SECRET)
    expect(text).not.toContain('SETUP_TOKEN')
  }
  expect(r.outputs[2]).toContain('grep-done')
  // Setup's host through the agent's proxy: refused, the agent's list does not hold it.
  expect(r.outputs[3]).toMatch(/status 403 .*not in tools\.allowed_hosts/)
}

const asRoot = process.getuid?.() === 0
const setpriv = spawnSync('setpriv', ['--version']).status === 0

describe.runIf(asRoot)("setup's secret and host, out of the agent's reach", () => {
  it('as root (commands as nobody)', { timeout: 240_000 }, async () => {
    expectContained(await hostileRun(0))
  })

  it.runIf(setpriv)('as an unprivileged user (setpriv)', { timeout: 240_000 }, async () => {
    expectContained(await hostileRun(65533))
  })
})
