import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { prune } from '../../src/context/prune.js'
import type { WindowMessage } from '../../src/storage/format/records.js'
import type { RecordedRequest } from '../helpers/fake-llm.js'
import { agentRequests, expectWellFormed, onlyTask, runSetup } from './harness.js'

type Sent = { role: string; content: string | null; tool_calls?: { id: string }[]; tool_call_id?: string }

const sent = (r: RecordedRequest) => r.body.messages as unknown as Sent[]
const isSummaryCall = (r: RecordedRequest) => !Array.isArray(r.body.tools)
/** chars/4, as ctxagent estimates: what a request costs, give or take the tokenizer. */
const tokensOf = (r: RecordedRequest) => Math.ceil(JSON.stringify(r.body.messages).length / 4)

/**
 * A server that is down: a 500 asking for a 1 ms wait (`retry-after-ms`), which the client honours as any
 * server's (docs/running.md#rate-limits), so its retries run without seconds of its own backoff before the task pauses.
 */
const DOWN = { status: 500, content: 'down', headers: { 'retry-after-ms': '1' } }

describe('prune by tool rounds (one user turn, many rounds)', () => {
  it('a 30-round task: the last request carries only the protected rounds in full, every call still answered', async () => {
    const s = await runSetup()
    // A large context: nothing is compacted, only pruned.
    writeFileSync(
      s.config,
      s.fake.configYaml('context:\n  prune:\n    protected_tool_rounds: 5\n    step_rounds: 1\n').replace('context_length: 8000', 'context_length: 1000000'),
    )
    for (let i = 0; i < 30; i++) writeFileSync(join(s.ws, `f${i}.txt`), `line ${i}\n`.repeat(500)) // ~4 KB each
    s.fake.queue = Array.from({ length: 30 }, (_, i) => ({ calls: [{ name: 'read_file', arguments: { path: `f${i}.txt` } }] }))
    s.fake.queue.push({ content: 'read them all' })
    const res = await s.run(['run', '--task', 'read every file', '--workspace', s.ws])
    expect(res.code, res.stderr).toBe(0)
    const requests = agentRequests(s.fake)
    expect(requests).toHaveLength(31)
    for (const r of requests) expectWellFormed(r)
    const last = sent(requests.at(-1) as RecordedRequest)
    const results = last.filter((m) => m.role === 'tool')
    expect(results).toHaveLength(30)
    const full = results.filter((m) => (m.content ?? '').length > 1000)
    expect(full).toHaveLength(5)
    // The newest five rounds are the ones kept whole, and the rest are stubs.
    expect(results.slice(-5).every((m) => (m.content ?? '').length > 1000)).toBe(true)
    expect(results.slice(0, 25).every((m) => m.content === '[pruned]')).toBe(true)
    // The history on disk is unchanged.
    const task = onlyTask(s.tree)
    const stored = task.messages.filter((m) => m.role === 'tool')
    expect(stored.every((m) => String(m.content).length > 1000)).toBe(true)
  })

  it('a chat-like window: tool output within the last user turns is kept as before', () => {
    const round = (n: number): WindowMessage[] => [
      { role: 'user', content: `question ${n}` },
      { role: 'assistant', content: '', tool_calls: [{ id: `c${n}`, type: 'function', function: { name: 'read_file', arguments: '{}' } }] },
      { role: 'tool', content: `output ${n}`, tool_call_id: `c${n}`, tool_name: 'read_file' },
      { role: 'assistant', content: `answer ${n}` },
    ]
    const window = [{ role: 'system', content: 'sys' } as WindowMessage, ...[1, 2, 3, 4, 5].flatMap(round)]
    const out = prune(window, { protectedTurns: 3, protectedToolRounds: 5 })
    const tools = out.filter((m) => m.role === 'tool').map((m) => m.content)
    expect(tools).toEqual(['[pruned]', '[pruned]', 'output 3', 'output 4', 'output 5'])
    // Rounds decide when they are fewer than the turns would protect.
    expect(
      prune(window, { protectedTurns: 3, protectedToolRounds: 1 })
        .filter((m) => m.role === 'tool')
        .map((m) => m.content),
    ).toEqual(['[pruned]', '[pruned]', '[pruned]', '[pruned]', 'output 5'])
  })
})

describe('usage reports and bounded compaction', () => {
  it('compacts when the window holds more tool rounds than compression.max_rounds, far under the token limit', async () => {
    const s = await runSetup()
    writeFileSync(s.config, s.fake.configYaml('context:\n  compression:\n    max_rounds: 10\n').replace('context_length: 8000', 'context_length: 1000000'))
    let round = 0
    s.fake.fallback = (req) => {
      if (!Array.isArray(req.body.tools)) return { content: '## Original Task\nlist\n## Current State\nlisting' }
      const i = round++
      return i < 25 ? { calls: [{ name: 'list_dir', arguments: { path: '.', depth: 1 + (i % 3), limit: 10 + i } }] } : { content: 'listed' }
    }
    const res = await s.run(['run', '--task', 'list the workspace', '--workspace', s.ws])
    expect(res.code, res.stderr).toBe(0)
    const task = onlyTask(s.tree)
    expect(task.summaries.length).toBeGreaterThanOrEqual(2)
    // Each compaction is a bounded run of summary calls between two agent requests.
    const runs = s.fake.requests
      .map((r) => (Array.isArray(r.body.tools) ? '|' : 's'))
      .join('')
      .split('|')
    expect(Math.max(...runs.map((r) => r.length))).toBeLessThanOrEqual(5)
  })

  it('a server under-reporting usage: compaction still happens, with a summary, and no request exceeds the context', async () => {
    const s = await runSetup()
    // Pruning by rounds off in effect: the window must grow for compaction to matter.
    writeFileSync(s.config, s.fake.configYaml('context:\n  prune:\n    protected_tool_rounds: 1000\n'))
    for (let i = 0; i < 24; i++) writeFileSync(join(s.ws, `g${i}.txt`), `data ${i} `.repeat(300)) // ~2.4 KB each
    const lying = { prompt_tokens: 1000, completion_tokens: 10, total_tokens: 1010 }
    // Agent requests get the scripted rounds, summary requests a summary; all report 1,000 prompt tokens.
    let round = 0
    s.fake.fallback = (req) => {
      if (!Array.isArray(req.body.tools)) return { content: '## Original Task\nread the g files\n## Current State\nreading', usage: lying }
      const i = round++
      return i < 24 ? { calls: [{ name: 'read_file', arguments: { path: `g${i}.txt` } }], usage: lying } : { content: 'done', usage: lying }
    }
    const res = await s.run(['run', '--task', 'read the g files', '--workspace', s.ws])
    expect(res.code, res.stderr).toBe(0)
    expect(res.stderr).toMatch(/compaction goes by the estimate/)
    const task = onlyTask(s.tree)
    expect(task.summaries.length, res.stderr.slice(-3000)).toBeGreaterThan(0)
    for (const r of agentRequests(s.fake)) {
      expectWellFormed(r)
      expect(tokensOf(r)).toBeLessThanOrEqual(8000)
      // Never a silent cut: no request says history was left out without a summary before it.
      expect(sent(r).some((m) => /are left out of this request/.test(m.content ?? ''))).toBe(false)
    }
  })

  it('resuming a task whose window grew too large: a bounded number of summary calls, each within the context, then a well-formed request', async () => {
    const s = await runSetup()
    writeFileSync(
      s.config,
      s.fake.configYaml('context:\n  prune:\n    protected_tool_rounds: 1000\n').replace('context_length: 8000', 'context_length: 1000000'),
    )
    for (let i = 0; i < 40; i++) writeFileSync(join(s.ws, `h${i}.txt`), `h${i} `.repeat(2000)) // ~8 KB each
    s.fake.queue = Array.from({ length: 40 }, (_, i) => ({ calls: [{ name: 'read_file', arguments: { path: `h${i}.txt` } }] }))
    // Then the server fails: the task pauses (an LLM outage), its window ~80k tokens.
    s.fake.fallback = () => DOWN
    const first = await s.run(['run', '--task', 'read the h files', '--workspace', s.ws])
    expect(first.code, first.stderr).toBe(1)
    const paused = onlyTask(s.tree)
    expect(paused.location).toBe('paused')
    // The same task, now against a model with an 8,000-token context.
    writeFileSync(s.config, s.fake.configYaml('context:\n  prune:\n    protected_tool_rounds: 1000\n'))
    const before = s.fake.requests.length
    s.fake.queue = []
    s.fake.fallback = (req) =>
      Array.isArray(req.body.tools) ? { content: 'all read' } : { content: '## Original Task\nread the h files\n## Current State\nall read' }
    const res = await s.run(['run', '--resume', paused.uuid])
    expect(res.code, res.stderr).toBe(0)
    const after = s.fake.requests.slice(before)
    const summaries = after.filter(isSummaryCall)
    const firstAgent = after.findIndex((r) => !isSummaryCall(r))
    // Before its first request: one compaction, in at most 4 calls (+1 for a chunk boundary).
    expect(after.slice(0, firstAgent).filter(isSummaryCall).length).toBeGreaterThan(0)
    expect(after.slice(0, firstAgent).filter(isSummaryCall).length).toBeLessThanOrEqual(5)
    for (const r of summaries) expect(tokensOf(r)).toBeLessThanOrEqual(8000)
    const request = after[firstAgent] as RecordedRequest
    expectWellFormed(request)
    expect(tokensOf(request)).toBeLessThanOrEqual(8000)
  })

  it('every request carries max_tokens: a turn llm.max_output_tokens, a summary its own smaller budget (issue 19, item 14)', async () => {
    const s = await runSetup()
    writeFileSync(s.config, s.fake.configYaml('context:\n  compression:\n    max_rounds: 3\n').replace('llm:\n', 'llm:\n  max_output_tokens: 3000\n'))
    let round = 0
    s.fake.fallback = (req) => {
      if (!Array.isArray(req.body.tools)) return { content: '## Original Task\nlist\n## Current State\nlisting' }
      const i = round++
      return i < 8 ? { calls: [{ name: 'list_dir', arguments: { path: '.', depth: 1 + (i % 3), limit: 10 + i } }] } : { content: 'listed' }
    }
    const res = await s.run(['run', '--task', 'list the workspace', '--workspace', s.ws])
    expect(res.code, res.stderr).toBe(0)
    const agent = s.fake.requests.filter((r) => Array.isArray(r.body.tools))
    const summaries = s.fake.requests.filter((r) => !Array.isArray(r.body.tools))
    expect(summaries.length).toBeGreaterThan(0)
    for (const r of agent) expect(r.body.max_tokens).toBe(3000)
    const compactions = summaries.filter((r) => r.body.messages[0]?.content.startsWith('You are a conversation summarizer'))
    expect(compactions.length).toBeGreaterThan(0)
    // context 8,000: a compaction summary may take a quarter of it at most; the final summary its own budget.
    for (const r of compactions) expect(r.body.max_tokens).toBeLessThanOrEqual(2000)
    for (const r of summaries) expect(r.body.max_tokens).toBeLessThanOrEqual(3000)
  })

  it('a 900 KB task statement is cut to fit a small context, with a note; the task goes on instead of failing every request (issue 21)', async () => {
    const s = await runSetup()
    const statement = join(s.ws, 'issue.txt')
    writeFileSync(statement, `Fix the bug.\n${'x'.repeat(900 * 1024)}\nEND OF ISSUE`)
    s.fake.queue.push({ calls: [{ name: 'read_file', arguments: { path: 'calc.js' } }] }, { content: 'fixed' })
    const res = await s.run(['run', '--task-file', statement, '--workspace', s.ws])
    expect(res.code, res.stderr).toBe(0)
    for (const r of agentRequests(s.fake)) {
      expect(tokensOf(r)).toBeLessThanOrEqual(8000)
      const task = sent(r).find((m) => m.role === 'user')?.content ?? ''
      expect(task).toMatch(/^Fix the bug\./)
      expect(task).toMatch(/characters cut from this request to fit the context; the whole is in messages\.jsonl/)
      expect(task).toMatch(/END OF ISSUE$/)
    }
    // On disk the statement is whole.
    expect(String(onlyTask(s.tree).messages.find((m) => m.role === 'user')?.content).length).toBeGreaterThan(900 * 1024)
  })
})

describe('a prefix that stays put, and summaries that do not re-send the task (issue 30)', () => {
  const HEAD = Buffer.from('{"model":"fake-model","messages":[')
  /** The request's messages as sent (without the closing bracket), and what follows them (tools, max_tokens): both byte for byte. */
  function parts(r: RecordedRequest): { messages: Buffer; rest: Buffer } {
    expect(r.raw.subarray(0, HEAD.length).equals(HEAD)).toBe(true)
    const end = HEAD.length - 1 + Buffer.byteLength(JSON.stringify(r.body.messages))
    return { messages: r.raw.subarray(HEAD.length, end - 1), rest: r.raw.subarray(end) }
  }
  const pruned = (r: RecordedRequest) =>
    new Set(
      sent(r)
        .filter((m) => m.role === 'tool' && /\[pruned\]$/.test(m.content ?? ''))
        .map((m) => m.tool_call_id),
    )

  /** Shared bytes of two buffers from their start. */
  function sharedBytes(a: Buffer, b: Buffer): number {
    const n = Math.min(a.length, b.length)
    let i = 0
    while (i < n && a[i] === b[i]) i++
    return i
  }

  it('200 rounds in a small context: each request is the previous one plus new messages except at prune steps and compactions; cached tokens recorded; cost with cache rates in stats --json; the final summary in at most 2 bounded requests', async () => {
    const s = await runSetup('pricing:\n  fake-model: { prompt: 3, completion: 15, cached: 0.3 }\n')
    writeFileSync(
      s.config,
      `${s.fake.configYaml('context:\n  compression:\n    summary_max_tokens: 700\n')}pricing:\n  fake-model: { prompt: 3, completion: 15, cached: 0.3 }\n`,
    )
    const ROUNDS = 200
    for (let i = 0; i < ROUNDS; i++) writeFileSync(join(s.ws, `f${i}.txt`), `file ${i} holds ${'content '.repeat(120)}\n`)
    // Honest usage, and a prefix cache that serves what this request shares with the last one (in whole 64-token blocks).
    let previous: Buffer | null = null
    let round = 0
    let answered = false
    const reported = { prompt: 0, cached: 0 }
    s.fake.fallback = (req) => {
      const agent = Array.isArray(req.body.tools)
      const cached = previous === null ? 0 : Math.floor(sharedBytes(previous, req.raw) / 256) * 64
      previous = req.raw
      const usage = {
        prompt_tokens: Math.ceil(req.raw.length / 4),
        completion_tokens: 20,
        total_tokens: Math.ceil(req.raw.length / 4) + 20,
        prompt_tokens_details: { cached_tokens: cached },
      }
      if (agent) (reported.prompt += usage.prompt_tokens), (reported.cached += cached)
      if (!agent) return { content: `## Original Task\nread the files\n## Current State\nread ${round}`, usage }
      const i = round++
      if (i >= ROUNDS) answered = true
      return i < ROUNDS ? { calls: [{ name: 'read_file', arguments: { path: `f${i}.txt` } }], usage } : { content: 'read them all', usage }
    }
    const res = await s.run(['run', '--task', 'read the files f0.txt to f199.txt', '--workspace', s.ws, '--max-turns', '300'])
    expect(res.code, res.stderr).toBe(0)
    expect(answered).toBe(true)
    const task = onlyTask(s.tree)
    expect(task.summaries.length, 'the small context compacts several times').toBeGreaterThanOrEqual(3)

    // Between two agent requests: a compaction (summary requests between them), a prune step, or the previous request plus new messages.
    const all = s.fake.requests
    let steps = 0
    let compactions = 0
    let kept = 0
    for (let i = 1, last = all.findIndex((r) => Array.isArray(r.body.tools)); i < all.length; i++) {
      const r = all[i] as RecordedRequest
      if (!Array.isArray(r.body.tools)) continue
      const before = all[last] as RecordedRequest
      const compacted = last !== i - 1
      last = i
      const a = parts(before)
      const b = parts(r)
      expect(b.rest.equals(a.rest), 'tools and max_tokens never change').toBe(true)
      if (b.messages.subarray(0, a.messages.length).equals(a.messages)) {
        kept++
        continue
      }
      if (compacted) compactions++
      else {
        // A prune step: outputs whole in the previous request are stubs now, and nothing else changed before them.
        const newly = [...pruned(r)].filter((id) => !pruned(before).has(id))
        expect(newly.length, `request ${i}: its prefix broke without a compaction or a prune step`).toBeGreaterThan(0)
        steps++
      }
    }
    expect(compactions).toBe(task.summaries.length)
    // The boundary moves once every 12 rounds at most (context.prune.step_rounds).
    expect(steps).toBeLessThanOrEqual(Math.ceil(ROUNDS / 12))
    expect(kept).toBeGreaterThan(ROUNDS * 0.8)

    // The provider's cached tokens, recorded per turn and per task; the cost at the cache rate.
    expect(task.state.prompt_tokens).toBe(reported.prompt)
    expect(task.state.cached_tokens).toBe(reported.cached)
    expect(reported.cached / reported.prompt).toBeGreaterThan(0.5)
    const stats = JSON.parse((await s.run(['stats', '--json'])).stdout) as { tokens: { prompt: number; cached: number; completion: number; cost_usd: number } }
    expect(stats.tokens).toMatchObject({ prompt: reported.prompt, cached: reported.cached })
    const usd = ((reported.prompt - reported.cached) * 3 + reported.cached * 0.3 + stats.tokens.completion * 15) / 1e6
    // The bill counts the compactions' and the final summary's requests too (docs/running.md#budgets).
    type Usage = { prompt_tokens: number; completion_tokens: number; cached_tokens: number } | undefined
    const summaries = [task.state.compaction_tokens as Usage, task.state.final_summary_tokens as Usage].reduce(
      (sum: number, u) => sum + (u ? ((u.prompt_tokens - u.cached_tokens) * 3 + u.cached_tokens * 0.3 + u.completion_tokens * 15) / 1e6 : 0),
      0,
    )
    expect(summaries).toBeGreaterThan(0)
    expect(stats.tokens.cost_usd).toBeCloseTo(usd + summaries, 5)

    // The final summary: after the answer, at most 2 requests, each with summary_max_tokens, recorded apart.
    const answer = all.indexOf(agentRequests(s.fake).at(-1) as RecordedRequest)
    const finals = all.slice(answer + 1)
    expect(finals.length).toBeGreaterThan(0)
    expect(finals.length).toBeLessThanOrEqual(2)
    for (const r of all.filter((x) => !Array.isArray(x.body.tools))) expect(r.body.max_tokens).toBe(700)
    expect(task.state.final_summary_tokens).toMatchObject({ requests: finals.length })
    // The compactions' requests: recorded on each summary and summed in state.json.
    const compactionRequests = all.slice(0, answer).filter((r) => !Array.isArray(r.body.tools))
    expect(task.summaries.every((r) => (r.usage as { requests: number } | undefined)?.requests !== undefined)).toBe(true)
    expect(task.state.compaction_tokens).toMatchObject({ requests: compactionRequests.length, completion_tokens: 20 * compactionRequests.length })
    const view = JSON.parse((await s.run(['view', task.uuid, '--json'])).stdout) as {
      tokens: Record<string, { requests: number; cost_usd: number | null } | undefined>
    }
    expect(view.tokens.final_summary).toMatchObject({ requests: finals.length })
    expect(view.tokens.final_summary?.cost_usd).toBeGreaterThan(0)
    expect(view.tokens.compactions).toMatchObject({ requests: compactionRequests.length })
    expect((await s.run(['view', task.uuid])).stdout).toMatch(/Compaction summaries: \d+ request\(s\), prompt [\d,]+; completion [\d,]+ · \$/)
  })
})

describe('a prefix that stays put across a pause (issue 30)', () => {
  it("a resumed task's first request is the one it would have sent, byte for byte, prune steps included", async () => {
    const s = await runSetup()
    writeFileSync(s.config, s.fake.configYaml().replace('context_length: 8000', 'context_length: 1000000'))
    for (let i = 0; i < 20; i++) writeFileSync(join(s.ws, `p${i}.txt`), `p${i} `.repeat(500))
    // 20 rounds: the boundary has moved once (after 15), so pruned stubs and whole outputs are both in the request.
    s.fake.queue = Array.from({ length: 20 }, (_, i) => ({ calls: [{ name: 'read_file', arguments: { path: `p${i}.txt` } }] }))
    s.fake.fallback = () => DOWN
    const first = await s.run(['run', '--task', 'read the p files', '--workspace', s.ws])
    expect(first.code, first.stderr).toBe(1)
    const refused = s.fake.requests.at(-1) as RecordedRequest
    expect(sent(refused).filter((m) => m.content === '[pruned]').length).toBeGreaterThan(0)
    s.fake.fallback = () => ({ content: 'all read' })
    const before = s.fake.requests.length
    const res = await s.run(['run', '--resume', onlyTask(s.tree).uuid])
    expect(res.code, res.stderr).toBe(0)
    const resumed = s.fake.requests[before] as RecordedRequest
    expect(resumed.raw.equals(refused.raw)).toBe(true)
  })
})
