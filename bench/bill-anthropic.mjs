// The bill of a long task on Anthropic's prompt cache (issue 34): the same task as bill.mjs
// (CTXAGENT_BENCH_ROUNDS rounds of read_file on ~9 KB files), a real `ctxagent run` with
// llm.provider anthropic against a zero-latency Messages API server on 127.0.0.1 that keeps
// a cache the way Anthropic documents it: entries only at `cache_control` breakpoints, a
// breakpoint's read looking back at most 20 blocks for an entry, writes billed at 1.25×,
// reads at 0.1×.
import { createHash } from 'node:crypto'
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { runTask, startJsonServer, tokens, workspace } from './bill-lib.mjs'
import { remove, scratch } from './lib.mjs'

/** How far back from a breakpoint the API looks for a cache entry (Anthropic's docs: 20 blocks). */
const LOOK_BACK = 20

/**
 * Anthropic's cache, as documented: the prompt is tools, then system, then messages, each
 * block a unit; an entry is the prefix up to a breakpoint; a request reads the longest
 * prefix that has an entry at a breakpoint or up to 20 blocks before one, writes from there
 * up to its last breakpoint, and the rest is input.
 */
export function anthropicCache() {
  const known = new Set()
  return {
    serve(body) {
      const strip = ({ cache_control, ...block }) => block
      const blocks = [...(body.tools ?? []), ...(body.system ?? []), ...body.messages.flatMap((m) => m.content.map((b) => ({ ...b, role: m.role })))]
      const hash = createHash('sha256')
      const names = []
      const sizes = []
      const marks = []
      blocks.forEach((b, i) => {
        const text = JSON.stringify(strip(b))
        hash.update(text)
        names.push(hash.copy().digest('base64'))
        sizes.push(tokens(text))
        if (b.cache_control) marks.push(i)
      })
      let hit = -1
      for (const mark of marks) for (let j = mark; j >= Math.max(0, mark - LOOK_BACK); j--) if (known.has(names[j])) hit = Math.max(hit, j)
      const sum = (from, to) => sizes.slice(from, to).reduce((a, b) => a + b, 0)
      const last = marks.at(-1) ?? -1
      for (const mark of marks) known.add(names[mark])
      const read = sum(0, hit + 1)
      const written = last > hit ? sum(hit + 1, last + 1) : 0
      return { read, written, input: sum(0, blocks.length) - read - written }
    },
  }
}

const SUMMARY = (n) =>
  `## Original Task\nRead every file of the workspace and report what it holds.\n## Completed Work\n- read ${n} files\n## Current State\n- reading the next files, ${n} done`

async function startServer(rounds) {
  const cache = anthropicCache()
  const seen = { rounds: 0, answered: false, agent: { read: 0, written: 0, input: 0 }, summaries: { requests: 0, read: 0, written: 0, input: 0, marked: 0 } }
  const server = await startJsonServer((body) => {
    const bill = cache.serve(body)
    let content
    const part = Array.isArray(body.tools) ? seen.agent : seen.summaries
    for (const k of ['read', 'written', 'input']) part[k] += bill[k]
    if (Array.isArray(body.tools)) {
      const n = seen.rounds++
      if (n < rounds)
        content = [
          { type: 'text', text: `Reading f${n}.txt next.` },
          { type: 'tool_use', id: `toolu_${n}`, name: 'read_file', input: { path: `f${n}.txt` } },
        ]
      else (seen.answered = true), (content = [{ type: 'text', text: `Read all ${rounds} files: nothing is broken.` }])
    } else {
      seen.summaries.requests++
      if (JSON.stringify(body).includes('cache_control')) seen.summaries.marked++
      content = [{ type: 'text', text: SUMMARY(seen.rounds) }]
    }
    const usage = {
      input_tokens: bill.input,
      cache_read_input_tokens: bill.read,
      cache_creation_input_tokens: bill.written,
      output_tokens: tokens(JSON.stringify(content)),
    }
    return {
      id: 'msg',
      type: 'message',
      role: 'assistant',
      model: body.model,
      content,
      stop_reason: content.some((b) => b.type === 'tool_use') ? 'tool_use' : 'end_turn',
      stop_sequence: null,
      usage,
    }
  })
  return { ...server, seen }
}

/** One whole task on the Messages API: what the cache read, wrote and left as input, agent and summary requests apart. */
export async function measureAnthropic(rounds) {
  const base = scratch('bill-anthropic')
  const server = await startServer(rounds)
  try {
    const ws = join(base, 'ws')
    workspace(ws, rounds)
    const config = join(base, 'config.yaml')
    writeFileSync(
      config,
      `llm:\n  provider: anthropic\n  anthropic:\n    base_url: ${server.url}\n    api_key: bench\n    model: bench\n    stream: false\n    max_retries: 0\n    context_length: 128000\n`,
    )
    await runTask({ base, ws, config, rounds, env: { ...process.env, ANTHROPIC_API_KEY: '', ANTHROPIC_BASE_URL: '' } })
    const { agent, summaries } = server.seen
    const billOf = (p) => p.input + 1.25 * p.written + 0.1 * p.read
    return { rounds, agent, summaries, bill: billOf(agent) + billOf(summaries), written: agent.written + summaries.written }
  } finally {
    await server.close()
    remove(base)
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const m = await measureAnthropic(Number(process.env.CTXAGENT_BENCH_ROUNDS ?? 1000))
  process.stdout.write(`${JSON.stringify(m)}\n`)
}
