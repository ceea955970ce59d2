// Repository environments (docs/environments.md), measured through the real `ctxagent run`
// (bwrap, the egress proxy) on fixture repositories this bench makes: a Node one with a
// lockfile and three dependencies, a Python one with a venv, installed from a registry
// stand-in in a network namespace of the bench's own (bench/environment-fixtures.mjs), which
// setup reaches only through its proxy (tools.allowed_networks lets the stand-in's private
// /32 through; the proxy refuses this host's loopback). ctxagent runs in a mount namespace
// whose /etc/hosts names the stand-in. The LLM is a scripted OpenAI-compatible server on
// 127.0.0.1 in this process.
//
// CTXAGENT_BENCH_ENV_ROUNDS (default 3): rounds of the start-up comparison;
// CTXAGENT_BENCH_ENV_BULK (default 200): files of 8 KB in the Node fixture's bulk dependency.
import { spawn, spawnSync } from 'node:child_process'
import { createServer } from 'node:http'
import { chmodSync, cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { privateCopy } from '../dist/workspace/environment/checkout.js'
import { median, remove, ROOT } from './lib.mjs'
import { buildRegistry, canRun, cloneOf, FAR_END, fixtures, hostsFile, makeOrigin, startRegistry } from './environment-fixtures.mjs'

const BIN = join(ROOT, 'bin', 'ctxagent')
const ROUNDS = Number(process.env.CTXAGENT_BENCH_ENV_ROUNDS ?? 3)
const BULK = Number(process.env.CTXAGENT_BENCH_ENV_BULK ?? 200)

/**
 * The scripted model: a task's statement names its script (`[script:NAME]`), and the turn is
 * the number of assistant messages in the request; past the script, finish. `firstAt` is when
 * the first request of the current run arrived.
 */
async function startLlm(scripts) {
  const seen = { firstAt: null }
  const server = createServer((req, res) => {
    let body = ''
    req.on('data', (d) => (body += d))
    req.on('end', () => {
      seen.firstAt ??= process.hrtime.bigint()
      const request = JSON.parse(body)
      const statement = request.messages.find((m) => m.role === 'user')?.content ?? ''
      const script = scripts[/\[script:([\w-]+)\]/.exec(statement)?.[1]] ?? []
      const turn = request.messages.filter((m) => m.role === 'assistant').length
      const command = script[turn]
      const call = command
        ? { name: 'run_command', arguments: JSON.stringify({ command, timeout_seconds: 120 }) }
        : { name: 'finish', arguments: JSON.stringify({ summary: 'done', status: 'done' }) }
      res.writeHead(200, { 'content-type': 'application/json' })
      res.end(
        JSON.stringify({
          id: 'x',
          object: 'chat.completion',
          created: 0,
          model: 'bench',
          choices: [
            {
              index: 0,
              finish_reason: 'tool_calls',
              message: { role: 'assistant', content: '', tool_calls: [{ id: `c${turn}`, type: 'function', function: call }] },
            },
          ],
          usage: { prompt_tokens: 1000, completion_tokens: 20, total_tokens: 1020 },
        }),
      )
    })
  })
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve))
  return { url: `http://127.0.0.1:${server.address().port}/v1`, seen, close: () => new Promise((resolve) => server.close(resolve)) }
}

/** `ctxagent run` in a mount namespace whose /etc/hosts names the registry: its exit, the ms to its first LLM request, its task's files. */
async function runTask(at, llm, ws, script) {
  llm.seen.firstAt = null
  const argv = [
    process.execPath,
    BIN,
    'run',
    '--task',
    `fix the bug [script:${script}]`,
    '--workspace',
    ws,
    '--allow-shell',
    '--home',
    at.tree,
    '--config',
    at.config,
    '--json',
  ]
  const started = process.hrtime.bigint()
  const child = spawn('unshare', ['--mount', '--propagation', 'private', '--', 'sh', '-c', 'mount --bind "$0" /etc/hosts && exec "$@"', at.hosts, ...argv], {
    env: { ...process.env, HOME: at.top },
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  let out = ''
  let err = ''
  child.stdout.on('data', (d) => (out += d))
  child.stderr.on('data', (d) => (err += d))
  const code = await new Promise((resolve) => child.on('exit', resolve))
  const uuid = /"uuid":\s*"([0-9a-f-]{36})"/.exec(out)?.[1]
  if (uuid === undefined) throw new Error(`run gave no task (exit ${code}): ${err.slice(-2000)}`)
  const dir = readdirSync(join(at.tree, 'completed'), { recursive: true })
    .map(String)
    .find((p) => p.endsWith(uuid))
  const base = join(at.tree, 'completed', dir)
  const read = (f) => (existsSync(join(base, f)) ? readFileSync(join(base, f), 'utf8') : '')
  const state = JSON.parse(read('state.json'))
  const firstMs = llm.seen.firstAt === null ? null : Number(llm.seen.firstAt - started) / 1e6
  return { code, err, firstMs, state, messages: read('messages.jsonl'), setupLog: read('setup.log') }
}

/** The setup log's lines of 12+ characters: the install output searched for in transcripts. */
function logLines(setupLog) {
  return [
    ...new Set(
      setupLog
        .split('\n')
        .map((l) => l.trim())
        .filter((l) => l.length >= 12),
    ),
  ]
}

/** Bytes of the transcript that are lines of the setup log (install output), as JSON-escaped in messages.jsonl. */
function installBytes(messages, setupLog) {
  return logLines(setupLog)
    .filter((l) => messages.includes(JSON.stringify(l).slice(1, -1)))
    .reduce((n, l) => n + Buffer.byteLength(l), 0)
}

function duBytes(path) {
  return Number(spawnSync('du', ['-sb', path], { encoding: 'utf8' }).stdout.split('\t')[0])
}

export async function run() {
  if (!canRun()) throw new Error('the environment bench needs root, iproute2 and unshare (a network namespace for the registry stand-in)')
  const top = mkdtempSync(join(tmpdir(), 'ctxagent-bench-env-'))
  chmodSync(top, 0o711)
  const registryDir = join(top, 'registry')
  const { lock } = buildRegistry(registryDir, join(top, 'stage'), BULK)
  const registry = await startRegistry(registryDir)
  const tasks = fixtures(lock)
  const scripts = Object.fromEntries(tasks.map((t) => [t.name, [t.test, t.fix]]))
  scripts.idle = []
  const llm = await startLlm(scripts)
  try {
    const at = { top, tree: join(top, 'tree'), config: join(top, 'config.yaml'), hosts: hostsFile(top) }
    mkdirSync(at.tree)
    writeFileSync(
      at.config,
      `llm:\n  provider: openai\n  openai:\n    base_url: ${llm.url}\n    api_key: bench\n    model: bench\n    max_retries: 0\ntools:\n  shell: true\n  allowed_networks: [${FAR_END}/32]\n`,
      { mode: 0o600 },
    )
    // One origin per fixture and variant; every task works in a clone of its own.
    let n = 0
    const origins = new Map()
    const repo = (files) => {
      const key = JSON.stringify(files)
      if (!origins.has(key)) {
        const dir = join(top, `origin${origins.size}`)
        mkdirSync(dir)
        origins.set(key, makeOrigin(dir, files))
      }
      const parent = join(top, `ws${n++}`)
      mkdirSync(parent)
      return cloneOf(origins.get(key), parent)
    }
    const node = tasks[0]
    const python = tasks[2]

    // Cold: the first task of each fixture runs setup (a cache miss).
    const coldNode = await runTask(at, llm, repo(node.files(true)), 'idle')
    const coldPython = await runTask(at, llm, repo(python.files(true)), 'idle')
    for (const [name, r] of [
      ['node', coldNode],
      ['python', coldPython],
    ])
      if (r.state.environment?.cache !== 'miss' || r.state.environment?.status !== 'ready')
        throw new Error(`${name}: setup did not run as expected: ${JSON.stringify(r.state.environment)} ${r.err.slice(-1500)}\n${r.setupLog.slice(-1500)}`)

    // Claim → first LLM request: no environment against a warm cache, rounds alternating.
    const none = []
    const warm = []
    for (let i = 0; i < ROUNDS; i++) {
      none.push((await runTask(at, llm, repo(node.files(false)), 'idle')).firstMs)
      const hit = await runTask(at, llm, repo(node.files(true)), 'idle')
      if (hit.state.environment?.cache !== 'hit') throw new Error(`warm run was not a cache hit: ${JSON.stringify(hit.state.environment)}`)
      warm.push(hit.firstMs)
    }
    const overhead = median(warm) - median(none)

    // Restore time against the cache's size: the copy a task gets (privateCopy, what a hit does), of the Node entry and of larger ones.
    const store = join(at.tree, 'environments')
    const entry = readdirSync(store, { recursive: true })
      .map(String)
      .find((p) => p.endsWith('paths/node_modules'))
    const entryPath = join(store, entry)
    const sizes = []
    for (const copies of [1, 5, 25]) {
      const from = join(top, `entry-${copies}`, 'node_modules')
      mkdirSync(from, { recursive: true })
      for (let c = 0; c < copies; c++) cpSync(entryPath, join(from, `copy${c}`), { recursive: true })
      const times = []
      for (let r = 0; r < 3; r++) {
        const to = join(top, `restore-${copies}-${r}`, 'node_modules')
        mkdirSync(join(to, '..'))
        const t0 = process.hrtime.bigint()
        privateCopy(from, to)
        times.push(Number(process.hrtime.bigint() - t0) / 1e6)
        remove(join(to, '..'))
      }
      sizes.push({
        bytes: duBytes(from),
        files: Number(spawnSync('sh', ['-c', `find '${from}' -type f | wc -l`], { encoding: 'utf8' }).stdout.trim()),
        ms: median(times),
      })
    }

    // The scripted sessions: each runs the test, fixes the bug, finishes; with the environment
    // ctxagent runs the test command itself; without, the same command runs in the final checkout.
    const outcomes = { with: [], without: [] }
    let transcriptInstall = 0
    let logged = 0
    for (const t of tasks) {
      const withEnv = await runTask(at, llm, repo(t.files(true)), t.name)
      outcomes.with.push(withEnv.state.test_run?.exit_code === 0)
      transcriptInstall += installBytes(withEnv.messages, coldNode.setupLog) + installBytes(withEnv.messages, coldPython.setupLog)
      const ws = repo(t.files(false))
      await runTask(at, llm, ws, t.name)
      const check = spawnSync('setpriv', ['--reuid=65534', '--regid=65534', '--clear-groups', '--', 'sh', '-c', t.test], {
        cwd: ws,
        encoding: 'utf8',
        timeout: 120_000,
      })
      outcomes.without.push(check.status === 0)
    }
    for (const r of [coldNode, coldPython]) {
      transcriptInstall += installBytes(r.messages, r.setupLog)
      logged += Buffer.byteLength(r.setupLog)
    }
    const share = (xs) => `${xs.filter(Boolean).length}/${xs.length}`
    const fetched = registry.requests.filter((l) => l.startsWith('GET ')).length
    const mb = (b) => `${(b / 1e6).toFixed(1)} MB`
    return [
      {
        name: 'env warm start',
        what: `ctxagent run, spawn → first LLM request, Node fixture (3 dependencies, ${BULK} files in one) with a warm cache vs the same repository without an environment file; ${ROUNDS} rounds alternating, medians, wall time`,
        measured: `${(median(warm) / 1000).toFixed(2)} s (no environment ${(median(none) / 1000).toFixed(2)} s)`,
        ratio: `+${(overhead / 1000).toFixed(2)} s`,
        target: '≤ +5 s',
        pass: overhead <= 5000,
      },
      {
        name: 'env cold setup',
        what: `setup on a cache miss (state.environment.setup_seconds): npm ci of the Node fixture; python3 -m venv and pip install of one wheel; from the registry stand-in through setup's egress proxy (${fetched} requests served)`,
        measured: `Node ${coldNode.state.environment.setup_seconds.toFixed(1)} s; Python ${coldPython.state.environment.setup_seconds.toFixed(1)} s`,
        ratio: `spawn → first request: Node ${(coldNode.firstMs / 1000).toFixed(1)} s, Python ${(coldPython.firstMs / 1000).toFixed(1)} s`,
        target: 'once per key (reported)',
        pass: true,
      },
      {
        name: 'env restore',
        what: "a cache hit's private copy into the checkout (privateCopy: cp -a --reflink=auto) against the entry's size: the Node entry, and 5 and 25 copies of it; median of 3",
        measured: sizes.map((s) => `${mb(s.bytes)} / ${s.files} files: ${s.ms.toFixed(0)} ms`).join('; '),
        ratio: `${(sizes[2].ms / (sizes[2].bytes / 1e6)).toFixed(1)} ms per MB at the largest`,
        target: '≤ 5 s at the largest',
        pass: sizes[2].ms <= 5000,
      },
      {
        name: 'env install output',
        what: "bytes of install output (setup log lines) in the transcripts of every task with an environment, against the setup logs' size",
        measured: `${transcriptInstall} B in transcripts (setup logs ${logged} B, ${logLines(coldNode.setupLog).length + logLines(coldPython.setupLog).length} lines searched)`,
        ratio: 'all of it in setup.log',
        target: '0 B',
        pass: transcriptInstall === 0 && logged > 0,
      },
      {
        name: 'env test passes',
        what: `scripted sessions (run the test, fix the bug, finish; no install by the agent, no network) on ${tasks.length} fixture tasks (2 Node, 1 Python): the test command's exit at the end, with the environment (state.test_run) and without (the same command in the final checkout)`,
        measured: `with ${share(outcomes.with)}; without ${share(outcomes.without)}`,
        ratio: `+${outcomes.with.filter(Boolean).length - outcomes.without.filter(Boolean).length} tasks`,
        target: 'all with the environment',
        pass: outcomes.with.every(Boolean),
      },
    ]
  } finally {
    await llm.close()
    registry.stop()
    remove(top)
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  for (const r of await run()) console.log(JSON.stringify(r))
}
