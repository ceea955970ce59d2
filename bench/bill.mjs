// The bill of a long task as providers charge it (issue 30): a real `ctxagent run` through
// CTXAGENT_BENCH_ROUNDS (default 1,000) rounds of read_file on ~9 KB files, against a
// zero-latency OpenAI-compatible server on 127.0.0.1 that reports honest usage and keeps a
// prefix cache the way providers do.
import { execFileSync } from 'node:child_process'
import { createHash } from 'node:crypto'
import { readFileSync, readdirSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { measureAnthropic } from './bill-anthropic.mjs'
import { runTask, startJsonServer, tokens, workspace } from './bill-lib.mjs'
import { median, remove, scratch } from './lib.mjs'

/** A cache block: 128 tokens (512 characters by the estimate); nothing under 1,024 tokens is cached. */
const BLOCK_CHARS = 128 * 4
const MIN_CACHED_BLOCKS = 1024 / 128

/**
 * A provider's prefix cache: the prompt (tools, then messages, as JSON) in 128-token blocks,
 * each named by the hash of everything up to its end; a request is served from the cache for
 * its longest run of leading blocks that any earlier request had (at least 1,024 tokens).
 */
export function prefixCache() {
  const known = new Set()
  return {
    /** Cached tokens of `prompt`; its blocks are remembered for later requests. */
    serve(prompt) {
      const hash = createHash('sha256')
      let cachedBlocks = 0
      let stillCached = true
      for (let at = 0; at + BLOCK_CHARS <= prompt.length; at += BLOCK_CHARS) {
        hash.update(prompt.slice(at, at + BLOCK_CHARS))
        const name = hash.copy().digest('base64')
        if (stillCached && known.has(name)) cachedBlocks++
        else stillCached = false
        known.add(name)
      }
      return cachedBlocks >= MIN_CACHED_BLOCKS ? cachedBlocks * 128 : 0
    },
  }
}

/** What the model gets, as a provider renders it: the tools, then the messages. */
const promptOf = (body) => `${JSON.stringify(body.tools ?? [])}${JSON.stringify(body.messages)}`

function sharedPrefix(a, b) {
  const n = Math.min(a.length, b.length)
  let i = 0
  // Compared in slices first: a 100 KB prompt is mostly equal.
  for (const step of [4096, 256, 1]) while (i + step <= n && a.slice(i, i + step) === b.slice(i, i + step)) i += step
  return i
}

const SUMMARY = (n) =>
  `## Original Task\nRead every file of the workspace and report what it holds.\n## Completed Work\n${Array.from({ length: 12 }, (_, i) => `- read f${Math.max(0, n - i)}.txt: handler config and tests, nothing broken`).join('\n')}\n## Key Discoveries\n- src/storage/jsonl.ts is where records are appended\n## Current State\n- reading the next files, ${n} done`

async function startServer(rounds) {
  const cache = prefixCache()
  const seen = {
    rounds: 0,
    answered: false,
    last: null,
    turns: [],
    compaction: { requests: 0, bytes: 0 },
    final: { requests: 0, bytes: 0 },
    input: 0,
    cached: 0,
    agentCached: 0,
  }
  const server = await startJsonServer((body, raw) => {
    const prompt = promptOf(body)
    const promptTokens = tokens(prompt)
    const cached = cache.serve(prompt)
    seen.input += promptTokens
    seen.cached += cached
    let message
    if (Array.isArray(body.tools)) {
      const shared = seen.last === null ? 0 : sharedPrefix(seen.last, prompt)
      // Shared: the share of the previous request that this one repeats from its start (1 when it is that request plus new messages).
      seen.turns.push({
        bytes: prompt.length,
        shared: seen.last === null ? 1 : shared / seen.last.length,
        uncachedKb: Math.max(0, prompt.length - cached * 4) / 1024,
      })
      seen.last = prompt
      seen.agentCached += cached
      const n = seen.rounds++
      if (n < rounds)
        message = {
          role: 'assistant',
          content: `Reading f${n}.txt next.`,
          tool_calls: [{ id: `call_${n}`, type: 'function', function: { name: 'read_file', arguments: JSON.stringify({ path: `f${n}.txt` }) } }],
        }
      else (seen.answered = true), (message = { role: 'assistant', content: `Read all ${rounds} files: handlers, configs and tests; nothing is broken.` })
    } else {
      const part = seen.answered ? seen.final : seen.compaction
      part.requests++
      part.bytes += raw.length
      message = { role: 'assistant', content: SUMMARY(seen.rounds) }
    }
    const completion = tokens(JSON.stringify(message))
    return {
      id: 'x',
      object: 'chat.completion',
      created: 0,
      model: body.model,
      choices: [{ index: 0, finish_reason: 'stop', message }],
      usage: {
        prompt_tokens: promptTokens,
        completion_tokens: completion,
        total_tokens: promptTokens + completion,
        prompt_tokens_details: { cached_tokens: cached },
      },
    }
  }, '/v1')
  return { ...server, seen }
}

/** One whole task: the figures of the bill, and the state.json the run wrote; `files` are written into its workspace (an AGENTS.md). */
export async function measure(rounds, extraConfig = '', files = {}) {
  const base = scratch('bill')
  const server = await startServer(rounds)
  try {
    const ws = join(base, 'ws')
    workspace(ws, rounds)
    // A repository of its own, its files committed: instructions are read from its commit, as a task's are.
    if (Object.keys(files).length > 0) {
      for (const [name, text] of Object.entries(files)) writeFileSync(join(ws, name), text)
      const git = (...args) => execFileSync('git', ['-c', 'user.name=bench', '-c', 'user.email=bench@example.com', ...args], { cwd: ws, stdio: 'ignore' })
      git('init', '-q')
      git('add', '-A')
      git('commit', '-qm', 'the workspace')
    }
    const config = join(base, 'config.yaml')
    writeFileSync(
      config,
      `llm:\n  provider: openai\n  openai:\n    base_url: ${server.url}\n    api_key: bench\n    model: bench\n    max_retries: 0\n${extraConfig}`,
    )
    await runTask({ base, ws, config, rounds })
    const completed = join(base, 'home', 'completed')
    const state = JSON.parse(readFileSync(join(completed, readdirSync(completed)[0], 'state.json'), 'utf8'))
    const s = server.seen
    const uncached = s.input - s.cached
    const sorted = s.turns.map((t) => t.shared).sort((a, b) => a - b)
    return {
      rounds,
      input: s.input,
      cached: s.cached,
      agentCached: s.agentCached,
      cachedShare: s.cached / s.input,
      bill: uncached + 0.1 * s.cached,
      billWrites: 1.25 * uncached + 0.1 * s.cached,
      uncachedKbMedian: median(s.turns.map((t) => t.uncachedKb)),
      sharedMedian: median(sorted),
      sharedP10: sorted[Math.floor(sorted.length * 0.1)],
      requests: s.turns.length,
      compaction: s.compaction,
      final: s.final,
      state,
    }
  } finally {
    await server.close()
    remove(base)
  }
}

/** This bench at 1b78265 (before issue 30), 1,000 rounds; the peers' figures from issue 30. */
const BEFORE = {
  input: 19.45e6,
  bill: 15.59e6,
  billWrites: 19.38e6,
  cachedShare: 0.22,
  uncachedKbMedian: 47.3,
  final: '25 requests, 6.36 MB',
  compaction: '30 requests, 6.12 MB',
}
const PEERS = 'Codex 13.6 M / 14.7 M, Qwen Code 15.5 M / 16.6 M, Gemini CLI 28.7 M / 30.6 M'

/**
 * bill-anthropic before issue 34's change (the prune step's breakpoint jumping past the 20-block
 * look-back, summary requests carrying cache_control), measured with this bench at 1,000 rounds.
 */
const BEFORE_ANTHROPIC = { bill: 6_568_463, written: 3_466_572 }

export async function run() {
  const rounds = Number(process.env.CTXAGENT_BENCH_ROUNDS ?? 1000)
  const a = await measureAnthropic(rounds)
  const m = await measure(rounds)
  const per = 1000 / rounds
  const M = (n) => `${((n * per) / 1e6).toFixed(2)} M`
  // state.json's split holds the turns' requests (the final summary's are apart, compactions' not recorded).
  const recorded = m.state.cached_tokens ?? 0
  const perA = 1000 / rounds
  return [
    {
      name: 'bill-anthropic',
      what: `input tokens billed on Anthropic's prompt cache (entries only at cache_control breakpoints, a read looking back at most 20 blocks; writes 1.25×, reads 0.1×) over a ${rounds}-round task (~9 KB read_file outputs, context 128,000), every request counted; per 1,000 rounds`,
      measured: `${((a.bill * perA) / 1e6).toFixed(2)} M; cache writes ${((a.written * perA) / 1e6).toFixed(2)} M; summary requests ${a.summaries.requests}, ${a.summaries.marked} with cache_control`,
      ratio: `${((a.bill * perA) / BEFORE_ANTHROPIC.bill).toFixed(3)}× before (${(BEFORE_ANTHROPIC.bill / 1e6).toFixed(2)} M; writes ${(BEFORE_ANTHROPIC.written / 1e6).toFixed(2)} M)`,
      target: '< 1× before, and no summary request with cache_control',
      pass: a.bill * perA < BEFORE_ANTHROPIC.bill && a.summaries.marked === 0,
    },
    {
      name: 'bill-cache',
      what: `input tokens billed by a provider with a prefix cache over a ${rounds}-round task (~9 KB read_file outputs, default context): cached at 0.1×, uncached at 1.25× (cache writes); per 1,000 rounds`,
      measured: `${M(m.billWrites)} (at 1× uncached: ${M(m.bill)}); ${(m.cachedShare * 100).toFixed(1)} % of ${M(m.input)} input served from the cache; state.json records ${recorded === m.agentCached ? 'the cached tokens the server reported for the turns' : `${recorded.toLocaleString('en-US')} cached tokens, the server ${m.agentCached.toLocaleString('en-US')}`}`,
      ratio: `${((m.billWrites * per) / BEFORE.billWrites).toFixed(2)}× before (${(BEFORE.billWrites / 1e6).toFixed(1)} M); peers ${PEERS}`,
      target: '≤ 7.4 M',
      pass: m.billWrites * per <= 7.4e6,
    },
    {
      name: 'bill-shared',
      what: 'share of the previous request that each request repeats from its start, byte for byte (tools and messages as JSON; 1 when it is the previous request plus new messages), median and 10th percentile; uncached KB per turn (median)',
      measured: `median ${m.sharedMedian.toFixed(3)}, p10 ${m.sharedP10.toFixed(3)}; ${m.uncachedKbMedian.toFixed(1)} KB uncached per turn`,
      ratio: `uncached KB per turn ${(m.uncachedKbMedian / BEFORE.uncachedKbMedian).toFixed(2)}× before (${BEFORE.uncachedKbMedian} KB; peers ~9 KB)`,
      target: 'median ≥ 0.95, p10 ≥ 0.90',
      pass: m.sharedMedian >= 0.95 && m.sharedP10 >= 0.9,
    },
    {
      name: 'bill-uncached',
      what: 'input tokens sent (the bill without a cache), per 1,000 rounds',
      measured: M(m.input),
      ratio: `${((m.input * per) / BEFORE.input).toFixed(2)}× before (${(BEFORE.input / 1e6).toFixed(1)} M)`,
      target: `≤ 1.5× before (${((1.5 * BEFORE.input) / 1e6).toFixed(1)} M)`,
      pass: m.input * per <= 1.5 * BEFORE.input,
    },
    {
      name: 'bill-summaries',
      what: 'summary requests: compactions, and the final summary at completion (requests, bytes sent)',
      measured: `compactions ${m.compaction.requests} requests, ${(m.compaction.bytes / 1e6).toFixed(2)} MB; final summary ${m.final.requests} requests, ${(m.final.bytes / 1e3).toFixed(0)} KB`,
      ratio: `before: compactions ${BEFORE.compaction}, final summary ${BEFORE.final}`,
      target: 'final summary ≤ 2 requests',
      pass: m.final.requests <= 2,
    },
    instructionsRow(m, await measure(rounds, '', { 'AGENTS.md': INSTRUCTIONS }), rounds),
  ]
}

/** An instructions file of ~4 KB (docs/environments.md#project-instructions): what a repository's AGENTS.md holds. */
export const INSTRUCTIONS = (() => {
  let text = '# Project instructions\n\n'
  for (let i = 0; text.length < 4096; i++)
    text += `- Rule ${i}: run \`npm test\` before you finish; keep functions small and files under 300 lines; name things for what they hold.\n`
  return text
})()

/**
 * The bill with the instructions file against the same task without it, taken apart: the file's
 * tokens as sent (one uncached write, then read from the cache by every request, which carries
 * the system prompt), and what is left, which is what the file costs beyond itself.
 */
export function instructionsRow(without, withFile, rounds) {
  const per = 1000 / rounds
  const extraInput = withFile.input - without.input
  const extraUncached = withFile.input - withFile.cached - (without.input - without.cached)
  // Summary requests carry their own system prompt, not the task's: only the agent's requests carry the file.
  const requests = withFile.requests
  const own = 1.25 * extraUncached + 0.1 * (extraInput - extraUncached)
  const beyond = withFile.billWrites - without.billWrites - own
  return {
    name: 'bill-instructions',
    what: `input tokens billed (cached 0.1×, uncached 1.25×) over the ${rounds}-round task with a ${(INSTRUCTIONS.length / 1024).toFixed(1)} KB AGENTS.md (~${Math.ceil(INSTRUCTIONS.length / 4)} tokens) at the repository's commit vs without; per 1,000 rounds`,
    measured: `${((withFile.billWrites * per) / 1e6).toFixed(3)} M vs ${((without.billWrites * per) / 1e6).toFixed(3)} M: +${Math.round(((withFile.billWrites - without.billWrites) * per) / 1e3)}k, of which the file's section written once (${extraUncached.toLocaleString('en-US')} uncached tokens) and read from the cache by each of ${requests} requests (${Math.round((extraInput - extraUncached) / withFile.requests).toLocaleString('en-US')} tokens each); beyond that ${Math.round(beyond * per).toLocaleString('en-US')} tokens; compactions ${withFile.compaction.requests} vs ${without.compaction.requests}`,
    ratio: `${(withFile.billWrites / without.billWrites).toFixed(4)}× without; ${((withFile.billWrites - own) / without.billWrites).toFixed(4)}× without once the file's own tokens are taken off`,
    target: "≤ 1.01× without, plus the file's own tokens (written once, then read from the cache)",
    pass: withFile.billWrites - own <= 1.01 * without.billWrites,
  }
}
