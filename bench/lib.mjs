// Shared helpers for the benchmarks: timing, medians, realistic data, task trees.
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'

export const ROOT = fileURLToPath(new URL('..', import.meta.url))
export const DATA = join(ROOT, 'bench', '.data')

export function scratch(name) {
  mkdirSync(DATA, { recursive: true })
  return mkdtempSync(join(DATA, `${name}-`))
}

export function remove(path) {
  rmSync(path, { recursive: true, force: true })
}

export function median(values) {
  const sorted = [...values].sort((a, b) => a - b)
  const mid = Math.floor(sorted.length / 2)
  return sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2
}

/** Runs fn `runs` times (after one warm-up unless warm=false) and returns the median ms. */
export async function timeMedian(fn, runs = 5, warm = true) {
  if (warm) await fn()
  const times = []
  for (let i = 0; i < runs; i++) {
    const start = process.hrtime.bigint()
    await fn()
    times.push(Number(process.hrtime.bigint() - start) / 1e6)
  }
  return median(times)
}

/**
 * Times several fns against each other: one warm-up each, then `runs` rounds that
 * run every fn once in turn, so that a drift in the machine's speed (other tenants,
 * page cache, CPU frequency) hits all of them alike. A fn may return a clean-up
 * function, which runs untimed. Returns the median ms of each.
 */
export async function timeInterleaved(fns, runs = 5) {
  const once = async (fn) => {
    const start = process.hrtime.bigint()
    const cleanup = await fn()
    const ms = Number(process.hrtime.bigint() - start) / 1e6
    if (typeof cleanup === 'function') await cleanup()
    return ms
  }
  for (const fn of fns) await once(fn)
  const times = fns.map(() => [])
  for (let i = 0; i < runs; i++) {
    for (let k = 0; k < fns.length; k++) times[k].push(await once(fns[k]))
  }
  return times.map(median)
}

/** Deterministic pseudo-random numbers, so every run writes the same data. */
export function rng(seed = 42) {
  let s = seed >>> 0
  return () => {
    s = (s * 1664525 + 1013904223) >>> 0
    return s / 2 ** 32
  }
}

// Code, diffs, shell output and prose: snake_case, flags, paths, versions, the odd
// address and decorator, so that masking and escaping see what they would in practice.
const WORDS = [
  'const',
  'return',
  'function',
  'await',
  'import',
  'src/storage/jsonl.ts',
  'error',
  'TypeError:',
  'undefined',
  'the',
  'test',
  'fixed',
  'handler',
  'config.yaml',
  'if',
  '(',
  ')',
  '{',
  '}',
  'value',
  'result',
  'line',
  '42',
  'README.md',
  'npm',
  'build',
  'passed',
  'max_retries',
  'user_id',
  '--dry-run',
  '--- a/src/app.py',
  '+++ b/src/app.py',
  '@@ -10,7 +10,8 @@',
  'self.assertEqual',
  'lodash@4.17.21',
  'AssertionError:',
  'node_modules/.bin/vitest',
  'def handle_request(req):',
  '"status": "ok",',
  'git@github.com:acme/shop.git',
  'x-request-id',
  'HTTP/1.1 200 OK',
  'TODO',
  '=>',
  '&&',
  'Error: ENOENT',
  '@Component',
  'ÄÖÜ',
  'résumé',
]

/** Text that looks like agent traffic: code, paths, errors; `bytes` long. */
export function agentText(random, bytes) {
  const lines = []
  let length = 0
  while (length < bytes) {
    // Lines of 5–12 words, like source code, logs and diffs.
    const words = []
    for (let n = 5 + Math.floor(random() * 8); n > 0; n--) {
      words.push(random() < 0.002 ? 'mail dev.ops@example.com' : WORDS[Math.floor(random() * WORDS.length)])
    }
    const line = words.join(' ')
    lines.push(line)
    length += line.length + 1
  }
  return lines.join('\n').slice(0, bytes)
}

export function liveLock(pid, start, host) {
  const now = new Date().toISOString()
  return JSON.stringify({ process_id: pid, hostname: host, acquired_at: now, heartbeat_at: now, process_start: start, token: 'bench' })
}

/** A task directory as ctxagent writes it (state carries message_count). */
export function writeBenchTask(
  dir,
  uuid,
  random,
  { messages = 20, status = 'completed', lock = null, completedAt = '2024-01-15T10:45:23.000Z', created = '2024-01-15T10:30:00.000Z' } = {},
) {
  mkdirSync(dir, { recursive: true })
  writeFileSync(
    join(dir, 'metadata.json'),
    `${JSON.stringify(
      {
        uuid,
        task_key: {
          task_source: 'github',
          owner: 'acme',
          repo: `repo${Math.floor(random() * 50)}`,
          task_type: 'issue',
          task_id: String(Math.floor(random() * 1000)),
        },
        task_type: 'github_issue',
        task_identifier: '1',
        repository: 'acme/repo',
        user: `user${Math.floor(random() * 20)}`,
        created_at: created,
        process_id: 1,
        hostname: 'bench',
        config: { llm_provider: 'openai', model: 'gpt-4o', context_length: 128000, compression_threshold: 0.7 },
      },
      null,
      2,
    )}\n`,
  )
  writeFileSync(
    join(dir, 'state.json'),
    `${JSON.stringify(
      {
        status,
        started_at: created,
        updated_at: completedAt ?? created,
        completed_at: completedAt,
        llm_call_count: messages,
        tool_call_count: 2,
        total_tokens_used: messages * 300,
        current_context_tokens: 3000,
        compression_count: 1,
        message_count: messages,
        last_activity: 'x',
        error: null,
        comment_detection: { last_comment_ids: [], last_check_timestamp: null },
      },
      null,
      2,
    )}\n`,
  )
  const lines = []
  for (let i = 1; i <= messages; i++)
    lines.push(
      JSON.stringify({
        seq: i,
        role: i % 2 ? 'assistant' : 'user',
        content: agentText(random, 200 + Math.floor(random() * 800)),
        timestamp: created,
        token_count: 100,
      }),
    )
  writeFileSync(join(dir, 'messages.jsonl'), `${lines.join('\n')}\n`)
  writeFileSync(join(dir, 'current.jsonl'), '')
  writeFileSync(
    join(dir, 'summaries.jsonl'),
    `${JSON.stringify({ summary_id: 1, start_seq: 1, end_seq: 5, summary: 'did things', created_at: created, original_tokens: 500, summary_tokens: 50, compression_ratio: 0.1 })}\n`,
  )
  writeFileSync(
    join(dir, 'tools.jsonl'),
    `${JSON.stringify({ seq: 1, tool_name: 'read', arguments: {}, result: 'ok', status: 'success', duration_ms: 3, timestamp: created })}\n${JSON.stringify({ seq: 2, tool_name: 'read', arguments: {}, result: 'ok', status: 'success', duration_ms: 3, timestamp: created })}\n`,
  )
  if (lock) writeFileSync(join(dir, '.lock'), lock)
}

export function uuidN(n) {
  const h = n.toString(16)
  return `${h.padStart(8, '0')}-0000-4000-8000-${h.padStart(12, '0')}`
}
