// Start-up as CPU time (user + system of the child, all its threads, from exec to its end), against
// `node -e 0` measured in the same run, rounds alternating: `ctxagent --version`, `ctxagent list`
// and `ctxagent run` to its first LLM request. CPU time, not wall time: on a shared 2-core machine
// a wall clock measures the neighbours too.
//
// The CPU time of a child is read the way the kernel accounts for it: bash runs it and `times`
// prints its waited-for children's user and system time (getrusage RUSAGE_CHILDREN; exact, not
// ticks). `run` is killed (SIGKILL) when the local OpenAI-compatible server on 127.0.0.1 has
// received its first request: until the reply comes it only waits, so what it spent is its
// start. It runs in a task tree that already exists (tasks.db made by a first, untimed run),
// as an operator's does.
//
// Also peak RSS (VmHWM) of `run` at turn 200 (bench/turn.mjs's task) against a bare Node process
// that has made one HTTP request, and run's CPU per turn over those turns.
// CTXAGENT_BENCH_START_ROUNDS (default 15) sets the rounds; CTXAGENT_BENCH_START_OTHER adds another build.
import { execFileSync, spawn } from 'node:child_process'
import { createServer } from 'node:http'
import { mkdirSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { median, remove, ROOT, scratch } from './lib.mjs'
import { timedRun } from './turn.mjs'

const BIN = join(ROOT, 'bin', 'ctxagent')
const ROUNDS = Number(process.env.CTXAGENT_BENCH_START_ROUNDS ?? 15)
const RSS_TURNS = 200
const RSS_ROUNDS = 3

/** Runs `argv` under bash and returns its CPU time in ms (user + sys, from `times`); `onPid` gets its pid. */
function cpuOf(argv, { onPid, env } = {}) {
  // `times` prints two lines, the shell's own and its children's: "0m0.062s 0m0.011s".
  const script = '"$@" </dev/null >/dev/null 2>&1 & echo $! >&2; wait $!; times'
  return new Promise((resolve, reject) => {
    const child = spawn('bash', ['-c', script, 'bash', ...argv], { stdio: ['ignore', 'pipe', 'pipe'], env: env ?? process.env })
    let out = ''
    let err = ''
    child.stdout.on('data', (d) => (out += d))
    child.stderr.on('data', (d) => {
      err += d
      const pid = /^(\d+)\n/.exec(err)
      if (pid && onPid) {
        onPid(Number(pid[1]))
        onPid = null
      }
    })
    child.on('exit', (code) => {
      const lines = out.trim().split('\n')
      const parse = (t) => {
        const m = /^(\d+)m([\d.]+)s$/.exec(t)
        return m ? (Number(m[1]) * 60 + Number(m[2])) * 1000 : Number.NaN
      }
      const [user, sys] = (lines[1] ?? '').split(' ').map(parse)
      if (code !== 0 || !(user >= 0 && sys >= 0)) reject(new Error(`bash ${argv.join(' ')}: exit ${code}, ${out} ${err}`))
      else resolve(user + sys)
    })
  })
}

/** A server that answers nothing: it calls `onFirst` when a request has fully arrived. */
async function startServer() {
  const state = { onRequest: null }
  const server = createServer((req, res) => {
    req.resume()
    req.on('end', () => {
      const done = state.onRequest
      state.onRequest = null
      done?.()
      res.destroy()
    })
  })
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve))
  return { url: `http://127.0.0.1:${server.address().port}/v1`, state, close: () => new Promise((resolve) => server.close(resolve)) }
}

/** `run` from exec to its first request's arrival at the server, then SIGKILL. */
function runToFirstRequest(server, bin, args) {
  let pid = null
  const arrived = new Promise((resolve) => (server.state.onRequest = resolve))
  const cpu = cpuOf([process.execPath, bin, ...args], { onPid: (p) => (pid = p) })
  arrived.then(() => process.kill(pid, 'SIGKILL'))
  return cpu.catch((err) => {
    throw new Error(`run did not reach its first request: ${err.message}`)
  })
}

function vmHwmOfBareNode() {
  // A bare Node process that has made one HTTP request to a local server, then reads its own peak RSS.
  const code =
    "const s=require('node:http').createServer((q,r)=>r.end('x')).listen(0,'127.0.0.1',async()=>{await (await fetch('http://127.0.0.1:'+s.address().port)).text();s.close();process.stdout.write(/VmHWM:\\s+(\\d+)/.exec(require('node:fs').readFileSync('/proc/self/status','utf8'))[1])})"
  return Number(execFileSync(process.execPath, ['-e', code]).toString()) / 1024
}

/**
 * Another built copy to measure beside this one, rounds alternating (CTXAGENT_BENCH_START_OTHER=
 * label=/path/to/its/bin/ctxagent): a lever's before and after in the same run.
 */
function others() {
  const spec = process.env.CTXAGENT_BENCH_START_OTHER
  if (!spec) return []
  return spec.split(',').map((item) => {
    const [label, bin] = item.split('=')
    return { label, bin }
  })
}

export async function startRows() {
  const dir = scratch('start')
  const server = await startServer()
  try {
    const home = join(dir, 'tree')
    const ws = join(dir, 'ws')
    mkdirSync(ws, { recursive: true })
    writeFileSync(join(ws, 'README.md'), 'a workspace\n')
    const config = join(dir, 'config.yaml')
    writeFileSync(config, `llm:\n  provider: openai\n  openai:\n    base_url: ${server.url}\n    api_key: bench\n    model: bench\n    max_retries: 0\n`)
    const common = ['--home', home, '--config', config]
    const runArgs = ['run', '--task', 'read the readme', '--workspace', ws, ...common, '--log-format', 'json']
    const bins = [{ label: 'this', bin: BIN }, ...others()]
    // The tree and tasks.db exist before the timed rounds, as an operator's do.
    await runToFirstRequest(server, BIN, runArgs)
    const cases = { node: () => cpuOf([process.execPath, '-e', '0']) }
    // What any process calling an LLM through fetch loads: Node 20 loads all of undici at the first Headers
    // or Response, which the OpenAI SDK's request building touches (bench/notes.md). Shown beside run, not its target.
    cases.fetch = () => cpuOf([process.execPath, '-e', 'globalThis.Headers'])
    for (const { label, bin } of bins) {
      cases[`${label}/version`] = () => cpuOf([process.execPath, bin, '--version'])
      cases[`${label}/list`] = () => cpuOf([process.execPath, bin, 'list', ...common])
      cases[`${label}/run`] = () => runToFirstRequest(server, bin, runArgs)
    }
    // The same list with the validation cache off: what a config file costs to parse and validate.
    cases['this/list-uncached'] = () => cpuOf([process.execPath, BIN, 'list', ...common], { env: { ...process.env, CTXAGENT_CONFIG_CACHE: 'off' } })
    const times = Object.fromEntries(Object.keys(cases).map((k) => [k, []]))
    for (const fn of Object.values(cases)) await fn()
    for (let i = 0; i < ROUNDS; i++) for (const [k, fn] of Object.entries(cases)) times[k].push(await fn())
    const m = Object.fromEntries(Object.entries(times).map(([k, v]) => [k, median(v)]))
    const ratio = (k) => m[k] / m.node
    const beside = (key) =>
      bins
        .slice(1)
        .map(({ label }) => `; ${label}: ${m[`${label}/${key}`].toFixed(0)} ms, ${ratio(`${label}/${key}`).toFixed(2)}×`)
        .join('')
    const row = (name, what, key, limit, more = '') => ({
      name,
      what: `${what}; CPU time (user + system, all threads) of the child, ${ROUNDS} rounds alternating with node -e 0, medians`,
      measured: `${m[`this/${key}`].toFixed(0)} ms (node -e 0: ${m.node.toFixed(0)} ms${beside(key)}${more})`,
      ratio: `${ratio(`this/${key}`).toFixed(2)}× node -e 0`,
      target: `≤ ${limit}× node -e 0`,
      pass: ratio(`this/${key}`) <= limit,
    })
    return [
      row('start-version', 'ctxagent --version', 'version', 2),
      row(
        'start-list',
        'ctxagent list of a task tree with a few tasks (tasks.db made), a config file given (its validation cached by the first round, as after any command: docs/configuration.md#the-validation-cache)',
        'list',
        2,
        `; the cache off: ${m['this/list-uncached'].toFixed(0)} ms, ${ratio('this/list-uncached').toFixed(2)}×`,
      ),
      row(
        'start-run',
        'ctxagent run --task … from exec to its first LLM request arriving at a local server (then SIGKILL: it is waiting on the reply), in an existing task tree, a config file given (its validation cached)',
        'run',
        3,
        `; a Node that has loaded fetch, node -e 'globalThis.Headers': ${m.fetch.toFixed(0)} ms, run ${(m['this/run'] / m.fetch).toFixed(2)}× it`,
      ),
    ]
  } finally {
    await server.close()
    remove(dir)
  }
}

export async function rssRow() {
  const bare = vmHwmOfBareNode()
  const bareE0 = vmHwmOfEmptyNode()
  // Three runs of each build, alternating, and the medians: one run's CPU a turn moved by 20 % with the neighbours.
  const bins = [{ label: 'this', bin: BIN }, ...others()]
  const runs = new Map(bins.map(({ label }) => [label, []]))
  for (let round = 0; round < RSS_ROUNDS; round++) {
    for (const { label, bin } of bins) {
      const r = await timedRun(RSS_TURNS, [], bin)
      runs.get(label).push({ peak: r.hwm.get(RSS_TURNS - 1), cpu: r.cpu.task })
    }
  }
  const measured = (label) => ({ peak: median(runs.get(label).map((r) => r.peak)), cpu: median(runs.get(label).map((r) => r.cpu)) })
  const mine = measured('this')
  const beside = []
  for (const { label } of others()) {
    const o = measured(label)
    beside.push(`; ${label}: ${o.peak.toFixed(1)} MB, ${o.cpu.toFixed(2)} ms CPU a turn`)
  }
  return {
    name: 'start-rss',
    what: `peak RSS (VmHWM) of bin/ctxagent run at turn ${RSS_TURNS} (bench/turn.mjs's task: read_file results 2–44 KB, default config) vs a bare Node process that has made one HTTP request with fetch (and node -e 0); beside it run's CPU a turn over the task; medians of ${RSS_ROUNDS} runs, builds alternating`,
    measured: `${mine.peak.toFixed(1)} MB (bare node ${bare.toFixed(1)} MB, node -e 0 ${bareE0.toFixed(1)} MB); ${mine.cpu.toFixed(2)} ms CPU a turn${beside.join('')}`,
    ratio: `${(mine.peak / bare).toFixed(2)}× bare node (${(mine.peak / bareE0).toFixed(2)}× node -e 0)`,
    target: '≤ 2× bare node',
    pass: mine.peak <= 2 * bare,
  }
}

/** Peak RSS of a Node process that does nothing but read it (node -e 0, near enough). */
function vmHwmOfEmptyNode() {
  const code = "process.stdout.write(/VmHWM:\\s+(\\d+)/.exec(require('node:fs').readFileSync('/proc/self/status','utf8'))[1])"
  return Number(execFileSync(process.execPath, ['-e', code]).toString()) / 1024
}

export async function run() {
  return [...(await startRows()), await rssRow()]
}

// Run alone: node bench/start.mjs [rss] prints the rows.
if (import.meta.url === `file://${process.argv[1]}`) {
  const rows = process.argv[2] === 'rss' ? [await rssRow()] : await startRows()
  for (const r of rows) process.stdout.write(`${r.name}: ${r.measured}; ${r.ratio}\n`)
}
