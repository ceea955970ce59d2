// Keep-alive chat: how soon a waiting agent picks up a message, and what it costs to wait.
import { spawn } from 'node:child_process'
import { createServer } from 'node:http'
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { remove, ROOT, scratch } from './lib.mjs'

const BIN = join(ROOT, 'bin', 'ctxagent')
const MESSAGES = 50
const BASELINE_MESSAGES = 10
const POLL_SECONDS = 5
const IDLE_MINUTES = Number(process.env.CTXAGENT_BENCH_IDLE_MINUTES ?? 10)
const { appendInbox } = await import(join(ROOT, 'dist', 'storage', 'task', 'inbox.js'))

const percentile = (values, p) => {
  const sorted = [...values].sort((a, b) => a - b)
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]
}

/** A chat completions server that notes when a request carrying "msg-<n>" arrives. */
async function startServer() {
  const arrived = new Map()
  const server = createServer((req, res) => {
    let body = ''
    req.on('data', (d) => (body += d))
    req.on('end', () => {
      const at = performance.now()
      const last =
        JSON.parse(body)
          .messages.filter((m) => m.role === 'user')
          .at(-1)?.content ?? ''
      const id = /msg-\d+/.exec(last)?.[0]
      if (id && !arrived.has(id)) arrived.set(id, at)
      res.writeHead(200, { 'content-type': 'application/json' })
      res.end(
        JSON.stringify({
          id: 'x',
          object: 'chat.completion',
          created: 0,
          model: 'bench',
          choices: [{ index: 0, finish_reason: 'stop', message: { role: 'assistant', content: `ok ${id}` } }],
          usage: { prompt_tokens: 10, completion_tokens: 2, total_tokens: 12 },
        }),
      )
    })
  })
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve))
  return { url: `http://127.0.0.1:${server.address().port}/v1`, arrived, close: () => new Promise((resolve) => server.close(resolve)) }
}

async function waitUntil(probe, ms = 30_000) {
  const deadline = Date.now() + ms
  while (!probe()) {
    if (Date.now() > deadline) throw new Error('bench: timed out')
    await new Promise((resolve) => setTimeout(resolve, 5))
  }
}

/** Starts `run --chat`; returns the child, the task directory and the tree. */
async function startChat(dir, url) {
  const ws = join(dir, 'ws')
  mkdirSync(ws, { recursive: true })
  writeFileSync(
    join(dir, 'config.yaml'),
    `llm:\n  provider: openai\n  openai:\n    base_url: ${url}\n    api_key: bench\n    model: bench\n    max_retries: 0\nchat:\n  wait_interval_seconds: ${POLL_SECONDS}\n  soft_timeout_minutes: ${IDLE_MINUTES + 5}\n`,
  )
  const tree = join(dir, 'tree')
  const child = spawn(
    process.execPath,
    [BIN, 'run', '--chat', '--workspace', ws, '--home', tree, '--config', join(dir, 'config.yaml'), '--log-format', 'json'],
    { stdio: ['ignore', 'ignore', 'ignore'] },
  )
  let task = null
  await waitUntil(() => {
    let uuid
    try {
      uuid = readdirSync(join(tree, 'running'), { withFileTypes: true }).find((e) => e.isDirectory())?.name
    } catch {
      return false
    }
    if (!uuid) return false
    task = join(tree, 'running', uuid)
    try {
      return JSON.parse(readFileSync(join(task, 'state.json'), 'utf8')).session?.state === 'active'
    } catch {
      return false
    }
  })
  return { child, task }
}

async function latency() {
  const dir = scratch('chat-latency')
  const server = await startServer()
  const { child, task } = await startChat(dir, server.url)
  try {
    const ms = []
    for (let i = 0; i < MESSAGES; i++) {
      const id = `msg-${i}`
      // Let the agent settle into its wait, as a person typing would.
      await new Promise((resolve) => setTimeout(resolve, 20))
      const sent = performance.now()
      appendInbox(task, { kind: 'message', sender: 'bench', content: `please answer ${id}` })
      await waitUntil(() => server.arrived.has(id))
      ms.push(server.arrived.get(id) - sent)
    }
    // The seed's design: a loop that reads the inbox every 5 s, on the same files.
    const baseline = []
    let offset = readFileSync(join(task, 'inbox.jsonl')).length
    for (let i = 0; i < BASELINE_MESSAGES; i++) {
      // Messages come at random moments relative to the poll.
      await new Promise((resolve) => setTimeout(resolve, Math.random() * POLL_SECONDS * 1000))
      const sent = performance.now()
      appendInbox(task, { kind: 'message', sender: 'bench', content: `baseline ${i}` })
      const pollStart = performance.now()
      // Next poll tick of a loop started at t=0 with a 5 s period.
      const phase = (pollStart - startedAt) % (POLL_SECONDS * 1000)
      await new Promise((resolve) => setTimeout(resolve, POLL_SECONDS * 1000 - phase))
      const size = readFileSync(join(task, 'inbox.jsonl')).length
      if (size > offset) baseline.push(performance.now() - sent)
      offset = size
    }
    const p50 = percentile(ms, 50)
    const p95 = percentile(ms, 95)
    const base50 = percentile(baseline, 50)
    return {
      name: 'chat-latency',
      what: `from a message written to a waiting chat task's inbox to the LLM request that carries it, ${MESSAGES} messages, vs a ${POLL_SECONDS} s poll of the same inbox (the seed's design, ${BASELINE_MESSAGES} messages)`,
      measured: `p50 ${p50.toFixed(1)} ms, p95 ${p95.toFixed(1)} ms (poll: p50 ${(base50 / 1000).toFixed(2)} s)`,
      ratio: `${Math.round(base50 / p50)}× sooner than the poll (p50)`,
      target: 'p50 ≤ 200 ms and p95 ≤ 1 s',
      pass: p50 <= 200 && p95 <= 1000,
    }
  } finally {
    await stopChild(child)
    await server.close()
    remove(dir)
  }
}
const startedAt = performance.now()

function procSample(pid) {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8')
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
  const ticks = Number(fields[11]) + Number(fields[12])
  const rss = Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))[1]) / 1024
  return { ticks, rss, at: performance.now() }
}

async function idle() {
  const dir = scratch('chat-idle')
  const server = await startServer()
  const { child } = await startChat(dir, server.url)
  const hz = 100 // USER_HZ on Linux
  try {
    // A minute to settle (first GCs, lazy compilation), then samples every 10 s.
    await new Promise((resolve) => setTimeout(resolve, 60_000))
    const samples = [procSample(child.pid)]
    const end = Date.now() + IDLE_MINUTES * 60_000
    while (Date.now() < end) {
      await new Promise((resolve) => setTimeout(resolve, 10_000))
      samples.push(procSample(child.pid))
    }
    const first = samples[0]
    const last = samples.at(-1)
    const cpu = ((last.ticks - first.ticks) / hz / ((last.at - first.at) / 1000)) * 100
    const maxRss = Math.max(...samples.map((s) => s.rss))
    return {
      name: 'chat-idle',
      what: `a run --chat process waiting for ${IDLE_MINUTES} min (file watch, ${POLL_SECONDS} s poll, 30 s heartbeat), sampled every 10 s after a minute to settle`,
      measured: `CPU ${cpu.toFixed(2)} %; RSS ${first.rss.toFixed(1)} → ${last.rss.toFixed(1)} MB (max ${maxRss.toFixed(1)})`,
      ratio: `RSS ${(maxRss / first.rss).toFixed(2)}× the first sample`,
      target: 'CPU ≤ 1 % and RSS flat (≤ 1.1×)',
      pass: cpu <= 1 && maxRss <= 1.1 * first.rss,
    }
  } finally {
    await stopChild(child)
    await server.close()
    remove(dir)
  }
}

/** SIGTERM (the agent pauses the task and exits), then waits for it to be gone. */
function stopChild(child) {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve()
  const gone = new Promise((resolve) => child.once('exit', resolve))
  child.kill('SIGTERM')
  return gone
}

export async function run() {
  return [await latency(), await idle()]
}
