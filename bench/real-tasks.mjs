// Task directories written by ctxagent's own code (createTask, the handle's appends,
// complete), indexed by it as it goes: what stats, view and reindex read in practice.
// Run as a child: node bench/real-tasks.mjs <base> <first> <count> [summaries]; prints nothing.
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { parseConfig } from '../dist/config/load.js'
import { Layout } from '../dist/storage/fs/layout.js'
import { SqliteStore } from '../dist/storage/index/store.js'
import { createTask } from '../dist/storage/task/lifecycle.js'
import { agentText, rng, uuidN } from './lib.mjs'

/** Creates `count` completed tasks (uuids uuidN(first…)), each with a few messages, tool calls and `summaries` summaries. */
export async function makeRealTasks(base, first, count, { summaries = 1, messages = 6, index = true } = {}) {
  const config = parseConfig('')
  const layout = new Layout(base)
  const store = index ? SqliteStore.open(layout.db) : null
  const env = { layout, config, index: store, now: () => new Date(), warn: () => undefined }
  const random = rng(first)
  try {
    for (let i = first; i < first + count; i++) {
      const handle = await createTask(
        env,
        { task_key: { task_source: 'github', owner: 'acme', repo: `repo${i % 40}`, task_type: 'issue', task_id: String(i) }, user: `user${i % 50}` },
        { uuid: uuidN(i) },
      )
      handle.addMessage({ role: 'system', content: 'You are a coding agent.' })
      handle.addMessage({ role: 'user', content: agentText(random, 300) })
      for (let m = 0; m < messages; m++) {
        handle.addMessage({
          role: 'assistant',
          content: '',
          tool_calls: [{ id: `c${m}`, type: 'function', function: { name: 'read_file', arguments: `{"path":"f${m}.txt"}` } }],
        })
        handle.addMessage({ role: 'tool', tool_call_id: `c${m}`, tool_name: 'read_file', content: agentText(random, 500) })
        handle.addTool({ tool_name: 'read_file', arguments: { path: `f${m}.txt` }, result: 'ok', status: 'success', error: null, duration_ms: 1 })
      }
      let seq = 2
      for (let s = 0; s < summaries; s++) {
        handle.addSummary({
          start_seq: seq + 1,
          end_seq: seq + 2,
          summary: `## Original Task\nissue ${i}\n## Completed Work\n- step ${s}\n## Current State\n- going on`,
          created_at: new Date().toISOString(),
          original_tokens: 400,
          summary_tokens: 40,
          compression_ratio: 0.1,
          compressed_message_count: 2,
          tokens_saved: 360,
          method: 'llm',
          model: 'bench',
        })
        seq += 2
      }
      await handle.update({ llm_call_count: messages, total_tokens_used: messages * 300 })
      await handle.complete('done')
    }
  } finally {
    await store?.close()
  }
}

/**
 * Fills <base>/completed with `total` tasks (uuids uuidN(1…total)): copies of the
 * templates under <templates>/completed (written by makeRealTasks), the uuid in
 * metadata.json changed to the copy's; every other file byte for byte. No tasks.db:
 * run ctxagent reindex to build it the way the real code does.
 */
export function cloneTasks(templates, base, total) {
  const from = join(templates, 'completed')
  const sources = readdirSync(from)
    .sort()
    .map((uuid) => {
      const dir = join(from, uuid)
      return { uuid, files: readdirSync(dir).map((name) => [name, readFileSync(join(dir, name))]) }
    })
  for (const l of ['running', 'paused', 'completed']) mkdirSync(join(base, l), { recursive: true })
  for (let i = 1; i <= total; i++) {
    const source = sources[(i - 1) % sources.length]
    const uuid = uuidN(i)
    const dir = join(base, 'completed', uuid)
    mkdirSync(dir, { mode: 0o700 })
    for (const [name, bytes] of source.files) {
      writeFileSync(join(dir, name), name === 'metadata.json' ? bytes.toString().replace(source.uuid, uuid) : bytes, { mode: 0o600 })
    }
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const [base, first, count, summaries] = process.argv.slice(2)
  await makeRealTasks(base, Number(first), Number(count), { summaries: Number(summaries ?? 1) })
}
