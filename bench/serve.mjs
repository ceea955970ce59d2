// ctxagent serve over an index of 100,000 tasks, in tasks.db and in PostgreSQL: the task
// list (/, unfiltered and filtered) and /metrics, each timed against a static file of the
// same server (/style.css: the HTTP round trip alone), and the server's peak resident
// memory after those requests; then the live follower's delay (SSE) from an append to
// messages.jsonl to the event at an EventSource-like client; and the per-turn cost of
// OpenTelemetry traces: bin/ctxagent run against a zero-latency server (bench/turn.mjs's
// timedRun), traces on (to a local OTLP/HTTP receiver) vs off, runs alternating.
import { spawn } from 'node:child_process'
import { appendFileSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs'
import { createServer } from 'node:http'
import { join } from 'node:path'
import { median, remove, ROOT, scratch, timeInterleaved, uuidN } from './lib.mjs'
import { startPostgres } from './fleet-lib.mjs'
import { timedRun } from './turn.mjs'

const TASKS = 100_000
const USERS = ['alice', 'bob', 'carol', 'dave', 'erin', 'frank', 'gina', 'hank']
const STATUSES = ['completed', 'completed', 'completed', 'failed', 'timeout']
const LIVE_EVENTS = 30
/** Turns per run of the telemetry row, and runs each way (on, off), alternating. */
const TELEMETRY_TURNS = 400
const TELEMETRY_RUNS = 3

/** Rows as ctxagent writes them: metadata is a task's metadata.json (uuid, key, repository, user, config…). */
function rows() {
  const start = Date.parse('2024-01-01T00:00:00Z')
  const out = []
  for (let i = 0; i < TASKS; i++) {
    const uuid = uuidN(i + 1)
    const created = new Date(start + i * 60_000).toISOString()
    const done = new Date(start + i * 60_000 + (60 + (i % 7200)) * 1000).toISOString()
    const prompt = 1000 + (i % 5000)
    const user = USERS[i % USERS.length]
    const repository = `acme/repo${i % 40}`
    const model = i % 3 ? 'gpt-4o' : 'gpt-4o-mini'
    const metadata = {
      uuid,
      task_key: { task_type: 'github_issue', task_identifier: String(i), repository, user },
      task_type: 'github_issue',
      task_identifier: String(i),
      repository,
      user,
      created_at: created,
      process_id: 1000 + (i % 30000),
      hostname: `host-${i % 6}`,
      config: { llm_provider: 'openai', model, context_length: 128000, compression_threshold: 0.7 },
      run: { workspace: `/srv/work/${repository}` },
    }
    out.push({
      uuid,
      status: STATUSES[i % STATUSES.length],
      location: 'completed',
      task_type: 'github_issue',
      task_identifier: String(i),
      repository,
      user,
      hostname: `host-${i % 6}`,
      created_at: created,
      started_at: created,
      updated_at: done,
      completed_at: done,
      metadata: JSON.stringify(metadata),
      total_messages: 20 + (i % 50),
      total_summaries: i % 3,
      total_tool_calls: 10 + (i % 30),
      llm_call_count: 10 + (i % 30),
      total_tokens: prompt + 300,
      prompt_tokens: prompt,
      completion_tokens: 300,
      cached_tokens: i % 2 ? 500 : 0,
      compression_count: i % 3,
      final_token_count: 4000,
      final_message_count: 30,
      error_message: i % 97 === 0 ? 'agent died (pid 123 on host-1)' : null,
      disk_bytes: 20_000,
      disk_bytes_raw: 60_000,
    })
  }
  return out
}

/**
 * BENCH_ROWS=telemetry-turn (or serve-live; any serve-list, serve-metrics or serve-rss row
 * runs those of both indexes, together) runs only those rows.
 */
export async function run() {
  const wanted = process.env.BENCH_ROWS ? process.env.BENCH_ROWS.split(',').map((r) => r.trim()) : null
  const runs = (row) => wanted === null || wanted.some(row)
  const base = scratch('serve')
  const results = []
  try {
    for (const l of ['running', 'paused', 'completed']) mkdirSync(join(base, l), { recursive: true })
    if (runs((r) => /^serve-(list|metrics|rss)/.test(r))) results.push(...(await indexRows(base)))
    if (runs((r) => r === 'serve-live')) results.push(await liveDelay(base))
    if (runs((r) => r === 'telemetry-turn')) results.push(await telemetryCost())
    if (results.length === 0) throw new Error(`BENCH_ROWS: no serve row ${wanted} (rows: serve-list…, serve-metrics…, serve-rss…, serve-live, telemetry-turn)`)
    return results
  } finally {
    remove(base)
  }
}

/** The page, /metrics and memory rows over the 100,000 tasks, in tasks.db and then in PostgreSQL. */
async function indexRows(base) {
  const data = rows()
  const results = []
  const { TaskIndex } = await import(join(ROOT, 'dist', 'storage', 'index', 'task-index.js'))
  const index = TaskIndex.open(join(base, 'tasks.db'))
  index.replaceAll(data)
  index.close()
  results.push(...(await measure(base, {}, 'tasks.db', '')))
  const db = await startPostgres()
  try {
    const { PgStore } = await import(join(ROOT, 'dist', 'storage', 'index', 'pg-store.js'))
    const store = await PgStore.open(db.url, () => undefined)
    await store.replaceAll(data)
    await store.close()
    results.push(...(await measure(base, { CTXAGENT_DATABASE_URL: db.url }, 'PostgreSQL', '-pg')))
  } finally {
    await db.stop()
  }
  return results
}

async function startServe(base, env) {
  const child = spawn(process.execPath, [join(ROOT, 'bin', 'ctxagent'), 'serve', '--port', '0', '--home', base, '--config', 'none'], {
    stdio: ['ignore', 'pipe', 'ignore'],
    env: { ...process.env, ...env },
  })
  const url = await new Promise((resolve, reject) => {
    let out = ''
    child.stdout.on('data', (d) => {
      out += d
      const m = /on (http:\/\/\S+)/.exec(out)
      if (m) resolve(m[1])
    })
    child.once('exit', (code) => reject(new Error(`serve exited (${code})`)))
  })
  const get = (path) => async () => {
    const res = await fetch(`${url}${path}`)
    await res.text()
    if (res.status !== 200) throw new Error(`${path}: ${res.status}`)
  }
  return { child, url, get, stop: () => new Promise((resolve) => (child.once('exit', resolve), child.kill('SIGTERM'))) }
}

async function measure(base, env, backend, suffix) {
  const s = await startServe(base, env)
  try {
    const [page, metrics, filtered, rare, round] = await timeInterleaved(
      [s.get('/'), s.get('/metrics'), s.get('/?user=carol&q=repo7'), s.get('/?q=repo7%2F'), s.get('/style.css')],
      21,
    )
    const peakMb = Number(/VmHWM:\s+(\d+)/.exec(readFileSync(`/proc/${s.child.pid}/status`, 'utf8'))[1]) / 1024
    const row = (name, what, ms) => ({
      name: name + suffix,
      what: `${what}; ${backend}`,
      measured: `${ms.toFixed(1)} ms p50 (a static file: ${round.toFixed(1)} ms)`,
      ratio: `${(ms / round).toFixed(1)}× a static file's round trip`,
      target: '≤ 100 ms p50',
      pass: ms <= 100,
    })
    return [
      row('serve-list', `GET / (the newest 50 of ${TASKS.toLocaleString('en-US')} indexed tasks, with the count and the filter choices)`, page),
      row('serve-list-filtered', 'GET /?user=…&q=… (a user and a text over the same index: 1 task in 40 matches)', filtered),
      row('serve-list-text', 'GET /?q=… (a text alone that no task matches: every row read)', rare),
      row('serve-metrics', `GET /metrics over ${TASKS.toLocaleString('en-US')} indexed tasks`, metrics),
      {
        name: `serve-rss${suffix}`,
        what: `serve's peak resident memory after those requests; ${backend}`,
        measured: `${peakMb.toFixed(0)} MB`,
        ratio: `${(peakMb / 150).toFixed(2)}× the target`,
        target: '≤ 150 MB',
        pass: peakMb <= 150,
      },
    ]
  } finally {
    await s.stop()
  }
}

/** A running task's page follower: append a message, time until its event arrives (SSE), vs a static file's round trip. */
async function liveDelay(base) {
  const uuid = uuidN(TASKS + 1)
  const dir = join(base, 'running', uuid)
  mkdirSync(dir)
  const now = new Date().toISOString()
  writeFileSync(
    join(dir, 'metadata.json'),
    JSON.stringify({
      uuid,
      task_key: { task_type: 'local_task', task_identifier: 'live', repository: '', user: 'alice' },
      task_type: 'local_task',
      task_identifier: 'live',
      repository: '',
      user: 'alice',
      created_at: now,
      process_id: process.pid,
      hostname: 'bench',
      config: { llm_provider: 'openai', model: 'gpt-4o', context_length: 128000, compression_threshold: 0.7 },
    }),
  )
  writeFileSync(
    join(dir, 'state.json'),
    JSON.stringify({
      status: 'processing',
      started_at: now,
      updated_at: now,
      total_tokens_used: 0,
      message_count: 1,
      summary_count: 0,
      tool_call_count: 0,
      llm_call_count: 0,
      compression_count: 0,
      current_context_tokens: 0,
    }),
  )
  const messages = join(dir, 'messages.jsonl')
  writeFileSync(messages, `${JSON.stringify({ seq: 1, role: 'user', content: 'live', timestamp: now, token_count: 1 })}\n`)
  const s = await startServe(base, {})
  try {
    const [round] = await timeInterleaved([s.get('/style.css')], 11)
    const res = await fetch(`${s.url}/tasks/${uuid}/events?after=1`)
    const reader = res.body.getReader()
    const decoder = new TextDecoder()
    let buffer = ''
    const nextData = async () => {
      for (;;) {
        const end = buffer.indexOf('\n\n')
        if (end >= 0) {
          const event = buffer.slice(0, end)
          buffer = buffer.slice(end + 2)
          if (/^data: /m.test(event)) return event
          continue
        }
        const { value, done } = await reader.read()
        if (done) throw new Error('the event stream ended')
        buffer += decoder.decode(value, { stream: true })
      }
    }
    const delays = []
    for (let i = 0; i < LIVE_EVENTS; i++) {
      // Unaligned with the follower's polls: a pause of its own between appends.
      await new Promise((resolve) => setTimeout(resolve, 37 + ((i * 13) % 90)))
      const at = process.hrtime.bigint()
      appendFileSync(
        messages,
        `${JSON.stringify({ seq: i + 2, role: 'assistant', content: `message ${i}`, timestamp: new Date().toISOString(), token_count: 2 })}\n`,
      )
      const event = await nextData()
      if (!event.includes(`message ${i}`)) throw new Error(`unexpected event: ${event}`)
      delays.push(Number(process.hrtime.bigint() - at) / 1e6)
    }
    await reader.cancel()
    const p50 = median(delays)
    return {
      name: 'serve-live',
      what: `a running task's page follower (Server-Sent Events): an append to messages.jsonl → its event at the client, ${LIVE_EVENTS} appends at unaligned times`,
      measured: `p50 ${p50.toFixed(1)} ms, max ${Math.max(...delays).toFixed(1)} ms (a static file: ${round.toFixed(1)} ms)`,
      ratio: `${(p50 / round).toFixed(1)}× a static file's round trip`,
      target: '≤ 200 ms p50',
      pass: p50 <= 200,
    }
  } finally {
    await s.stop()
  }
}

/** Median per-turn overhead (normal turns from turn 5 on) with traces sent to a local OTLP/HTTP receiver vs none. */
export async function telemetryCost() {
  let requests = 0
  let bytes = 0
  const receiver = createServer((req, res) => {
    req.on('data', (d) => (bytes += d.length))
    req.on('end', () => {
      requests++
      res.writeHead(200, { 'content-type': req.headers['content-type'] ?? 'application/json' })
      res.end(req.headers['content-type']?.includes('json') ? '{}' : '')
    })
  })
  await new Promise((resolve) => receiver.listen(0, '127.0.0.1', resolve))
  const endpoint = `http://127.0.0.1:${receiver.address().port}`
  const overheads = { on: [], off: [] }
  const cpu = { on: [], off: [] }
  const loads = []
  try {
    for (let i = 0; i < TELEMETRY_RUNS; i++) {
      for (const mode of i % 2 ? ['on', 'off'] : ['off', 'on']) {
        // run reads OTEL_EXPORTER_OTLP_ENDPOINT (telemetry.otlp_endpoint unset): timedRun's child inherits this environment.
        if (mode === 'on') process.env.OTEL_EXPORTER_OTLP_ENDPOINT = endpoint
        else delete process.env.OTEL_EXPORTER_OTLP_ENDPOINT
        const { records, load } = await timedRun(TELEMETRY_TURNS)
        const normal = records.filter((r) => r.turn >= 5 && !r.compaction)
        overheads[mode].push(...normal.map((r) => r.overhead))
        cpu[mode].push(...normal.map((r) => r.cpuMain))
        loads.push(...load)
      }
    }
  } finally {
    delete process.env.OTEL_EXPORTER_OTLP_ENDPOINT
    await new Promise((resolve) => receiver.close(resolve))
  }
  if (requests === 0) throw new Error('the OTLP receiver got no traces: telemetry was not on')
  const on = median(overheads.on)
  const off = median(overheads.off)
  const more = on - off
  const mean = (xs) => xs.reduce((a, b) => a + b, 0) / xs.length
  // Beside the wall time, which moves with the machine's load: the CPU time run's main thread spent in the gap.
  const cpuMore = median(cpu.on) - median(cpu.off)
  const signed = (ms) => `${ms >= 0 ? '+' : '−'}${Math.abs(ms).toFixed(3)}`
  return {
    name: 'telemetry-turn',
    what: `per-turn overhead of bin/ctxagent run (bench/turn.mjs's measure: reply sent → next request, less tool time; normal turns from turn 5) with OpenTelemetry traces exported to an OTLP/HTTP receiver on 127.0.0.1 vs off; ${TELEMETRY_RUNS} runs of ${TELEMETRY_TURNS} turns each way, alternating`,
    measured: `on ${on.toFixed(3)} ms vs off ${off.toFixed(3)} ms a turn (${requests} export requests, ${(bytes / 1024).toFixed(0)} KB); means ${mean(overheads.on).toFixed(3)} vs ${mean(overheads.off).toFixed(3)} ms; CPU of run's main thread in the gap ${median(cpu.on).toFixed(3)} vs ${median(cpu.off).toFixed(3)} ms; load average ${Math.min(...loads).toFixed(1)}–${Math.max(...loads).toFixed(1)}`,
    ratio: `${signed(more)} ms a turn (${(on / off).toFixed(2)}× off); main-thread CPU in the gap ${signed(cpuMore)} ms`,
    target: '≤ +0.1 ms a turn',
    pass: more <= 0.1,
  }
}
