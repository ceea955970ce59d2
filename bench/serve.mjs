// ctxagent serve over an index of 100,000 tasks: the task list (/) and /metrics, each
// timed against a static file of the same server (/style.css: the HTTP round trip alone),
// and the server's peak resident memory after those requests.
import { spawn } from 'node:child_process'
import { mkdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { TaskIndex } from '../dist/storage/index/task-index.js'
import { remove, ROOT, scratch, timeInterleaved, uuidN } from './lib.mjs'

const TASKS = 100_000
const USERS = ['alice', 'bob', 'carol', 'dave', 'erin', 'frank', 'gina', 'hank']
const STATUSES = ['completed', 'completed', 'completed', 'failed', 'timeout']

export async function run() {
  const base = scratch('serve')
  try {
    for (const l of ['running', 'paused', 'completed']) mkdirSync(join(base, l), { recursive: true })
    const index = TaskIndex.open(join(base, 'tasks.db'))
    const start = Date.parse('2024-01-01T00:00:00Z')
    const rows = []
    for (let i = 0; i < TASKS; i++) {
      const created = new Date(start + i * 60_000).toISOString()
      const done = new Date(start + i * 60_000 + (60 + (i % 7200)) * 1000).toISOString()
      const prompt = 1000 + (i % 5000)
      rows.push({
        uuid: uuidN(i + 1), status: STATUSES[i % STATUSES.length], location: 'completed', task_type: 'local_task', task_identifier: String(i), repository: `acme/repo${i % 40}`,
        user: USERS[i % USERS.length], hostname: `host-${i % 6}`, created_at: created, started_at: created, updated_at: done, completed_at: done,
        metadata: JSON.stringify({ uuid: uuidN(i + 1), config: { model: i % 3 ? 'gpt-4o' : 'gpt-4o-mini', llm_provider: 'openai' } }),
        total_messages: 20 + (i % 50), total_summaries: i % 3, total_tool_calls: 10 + (i % 30), llm_call_count: 10 + (i % 30), total_tokens: prompt + 300,
        prompt_tokens: prompt, completion_tokens: 300, cached_tokens: i % 2 ? 500 : 0, compression_count: i % 3, final_token_count: 4000, final_message_count: 30,
        error_message: null, disk_bytes: 20_000, disk_bytes_raw: 60_000,
      })
    }
    index.replaceAll(rows)
    index.close()
    const child = spawn(process.execPath, [join(ROOT, 'bin', 'ctxagent'), 'serve', '--port', '0', '--home', base, '--config', 'none'], { stdio: ['ignore', 'pipe', 'ignore'] })
    try {
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
      const [page, metrics, filtered, round] = await timeInterleaved([get('/'), get('/metrics'), get('/?user=carol&q=repo7'), get('/style.css')], 21)
      const peakMb = Number(/VmHWM:\s+(\d+)/.exec(readFileSync(`/proc/${child.pid}/status`, 'utf8'))[1]) / 1024
      const row = (name, what, ms) => ({ name, what, measured: `${ms.toFixed(1)} ms p50 (a static file: ${round.toFixed(1)} ms)`, ratio: `${(ms / round).toFixed(1)}× a static file's round trip`, target: '≤ 100 ms p50', pass: ms <= 100 })
      return [
        row('serve-list', `GET / (the newest 50 of ${TASKS.toLocaleString('en-US')} indexed tasks, with the count and the filter choices)`, page),
        row('serve-list-filtered', 'GET /?user=…&q=… (a user and a text filter over the same index)', filtered),
        row('serve-metrics', `GET /metrics over ${TASKS.toLocaleString('en-US')} indexed tasks`, metrics),
        { name: 'serve-rss', what: 'serve\'s peak resident memory after those requests', measured: `${peakMb.toFixed(0)} MB`, ratio: `${(peakMb / 150).toFixed(2)}× the target`, target: '≤ 150 MB', pass: peakMb <= 150 },
      ]
    } finally {
      child.kill('SIGTERM')
    }
  } finally {
    remove(base)
  }
}
