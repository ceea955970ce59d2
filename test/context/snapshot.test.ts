import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { compact, planCompaction, settingsFrom, shouldCompress } from '../../src/context/compaction.js'
import type { ContextSnapshot } from '../../src/context/snapshot.js'
import { loadSnapshot, rebuildWindow } from '../../src/context/snapshot.js'
import { extractiveSummary } from '../../src/context/extractive.js'
import { createFinalSummary } from '../../src/context/final-summary.js'
import { prune } from '../../src/context/prune.js'
import { extractiveSummarizer, llmSummarizer } from '../../src/context/summarizer.js'
import { parseConfig } from '../../src/config/load.js'
import { requireLlmClient } from '../../src/llm/providers.js'
import { Layout } from '../../src/storage/fs/layout.js'
import type { StoredMessage, WindowMessage } from '../../src/storage/format/records.js'
import { createTask } from '../../src/storage/task/lifecycle.js'
import type { TaskHandle } from '../../src/storage/task/handle.js'
import { makeTree } from '../fixtures/tree.js'
import { startFakeLlm } from '../helpers/fake-llm.js'

const TASK = 'Fix the login bug in src/auth/session.ts: users are logged out after 5 minutes.'

function msg(seq: number, role: StoredMessage['role'], extra: Partial<StoredMessage> = {}): StoredMessage {
  return { seq, role, content: `m${seq}`, timestamp: '', token_count: 10, ...extra }
}

/** user, then rounds of assistant(tool call) → tool result, with a user turn every `userEvery` rounds. */
function conversation(rounds: number, userEvery = 3): StoredMessage[] {
  const out = [msg(1, 'system'), msg(2, 'user', { content: TASK })]
  let seq = 3
  for (let r = 0; r < rounds; r++) {
    if (r > 0 && r % userEvery === 0) out.push(msg(seq++, 'user'))
    const id = `call_${r}`
    out.push(msg(seq++, 'assistant', { content: '', tool_calls: [{ id, type: 'function', function: { name: 'read_file', arguments: '{}' } }] }))
    out.push(msg(seq++, 'tool', { tool_call_id: id, tool_name: 'read_file' }))
  }
  return out
}

function snapshotOf(messages: StoredMessage[]): ContextSnapshot {
  return { system: messages[0] ?? null, task: messages[1] ?? null, summary: null, after: messages }
}

function readWindow(dir: string): WindowMessage[] {
  return readFileSync(join(dir, 'current.jsonl'), 'utf8')
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as WindowMessage)
}

describe('planCompaction', () => {
  it('never separates a tool result from the call that asked for it, for any keep_recent', () => {
    for (const userEvery of [1, 2, 3, 50]) {
      const messages = conversation(20, userEvery)
      for (let keepRecent = 1; keepRecent <= 30; keepRecent++) {
        const plan = planCompaction(snapshotOf(messages), { keepRecent, minToCompress: 5 })
        if (plan === null) continue
        expect(plan.keep[0]?.role).not.toBe('tool')
        const callsIn = (list: StoredMessage[]) => new Set(list.flatMap((m) => m.tool_calls?.map((c) => c.id) ?? []))
        for (const [part, calls] of [
          [plan.keep, callsIn(plan.keep)],
          [plan.summarize, callsIn(plan.summarize)],
        ] as const) {
          for (const m of part) if (m.role === 'tool') expect(calls.has(m.tool_call_id as string)).toBe(true)
        }
        expect(plan.keep.length).toBeGreaterThanOrEqual(Math.min(keepRecent, messages.length - 1))
        expect(plan.summarize.every((m) => m.role !== 'system')).toBe(true)
      }
    }
  })

  it('moves the split back to a user turn where that still leaves enough to summarize', () => {
    const plan = planCompaction(snapshotOf(conversation(20, 3)), { keepRecent: 10, minToCompress: 5 })
    expect(plan?.keep[0]?.role).toBe('user')
  })

  it('does nothing with too little to summarize, and compresses only over the limit', () => {
    expect(planCompaction(snapshotOf(conversation(3)), { keepRecent: 10, minToCompress: 5 })).toBeNull()
    const plan = planCompaction(snapshotOf(conversation(20)), { keepRecent: 10, minToCompress: 5 })
    expect(shouldCompress(plan, 1_000_000)).toBe(false)
    expect(shouldCompress(plan, 10)).toBe(true)
    expect(shouldCompress(plan, 10, 5)).toBe(false) // the provider's own count wins over the estimate
  })
})

describe('compaction of a live task', () => {
  async function liveTask(): Promise<{ handle: TaskHandle; base: string }> {
    const base = makeTree().base
    const config = parseConfig('')
    const handle = await createTask(
      { layout: new Layout(base), config, index: null, now: () => new Date(), warn: () => undefined },
      { task_key: { task_source: 'local', owner: 'me', repo: 'app', task_type: 'task', task_id: '7' }, user: 'dev' },
    )
    return { handle, base }
  }

  function addRounds(handle: TaskHandle, rounds: number, from: number): void {
    for (let r = from; r < from + rounds; r++) {
      if (r % 3 === 0) handle.addMessage({ role: 'user', content: `continue with step ${r}` })
      const id = `call_${r}`
      handle.addMessage({
        role: 'assistant',
        content: '',
        tool_calls: [{ id, type: 'function', function: { name: 'read_file', arguments: `{"path":"src/file${r}.ts"}` } }],
      })
      handle.addMessage({ role: 'tool', content: `contents of src/file${r}.ts ${'x'.repeat(400)}`, tool_call_id: id, tool_name: 'read_file' })
    }
  }

  it('nests summaries, keeps the original task verbatim through two compactions, and rebuild equals current.jsonl', async () => {
    const fake = await startFakeLlm()
    let n = 0
    fake.fallback = () => ({ content: `## Original Task\nlogin bug\n## Completed Work\n- summary number ${++n}` })
    const summarizer = llmSummarizer(requireLlmClient(parseConfig(fake.configYaml())))
    const { handle } = await liveTask()
    handle.addMessage({ role: 'system', content: 'You are a careful coding agent.' })
    handle.addMessage({ role: 'system', content: 'session start', visible: false })
    handle.addMessage({ role: 'user', content: TASK })
    addRounds(handle, 12, 0)
    const settings = settingsFrom(parseConfig(''))
    const first = await compact(planCompaction(await loadSnapshot(handle.dir), settings)!, summarizer, handle, new Date())
    expect(first.record).toMatchObject({ summary_id: 1, method: 'llm', model: 'fake-model', start_seq: 3 })
    expect(first.tokensAfter).toBeLessThan(first.tokensBefore)
    addRounds(handle, 12, 12)
    const second = await compact(planCompaction(await loadSnapshot(handle.dir), settings)!, summarizer, handle, new Date())
    expect(second.record).toMatchObject({ summary_id: 2, start_seq: first.record.end_seq + 1 })
    // The second request folds in the first summary.
    expect(fake.requests[1]?.body.messages[1]?.content).toContain('<previous_summary>\n## Original Task\nlogin bug\n## Completed Work\n- summary number 1')
    const window = readWindow(handle.dir)
    expect(window[0]).toEqual({ role: 'system', content: 'You are a careful coding agent.' })
    expect(window[1]).toEqual({ role: 'user', content: TASK })
    expect(window[2]?.content).toContain('summary number 2')
    expect(window.some((m) => m.content === 'session start')).toBe(false)
    expect(await rebuildWindow(handle.dir)).toEqual(window)
    addRounds(handle, 2, 24)
    expect(await rebuildWindow(handle.dir)).toEqual(readWindow(handle.dir))
    await handle.fail('test over')
  })

  it('leaves the window unchanged when the summarizer fails, so the next turn can retry', async () => {
    const fake = await startFakeLlm()
    fake.fallback = () => ({ status: 500, headers: { 'retry-after-ms': '1' } })
    const { handle } = await liveTask()
    handle.addMessage({ role: 'user', content: TASK })
    addRounds(handle, 12, 0)
    const before = readFileSync(join(handle.dir, 'current.jsonl'), 'utf8')
    const plan = planCompaction(await loadSnapshot(handle.dir), settingsFrom(parseConfig('')))!
    await expect(compact(plan, llmSummarizer(requireLlmClient(parseConfig(fake.configYaml()))), handle, new Date())).rejects.toThrow(/answered 500/)
    expect(readFileSync(join(handle.dir, 'current.jsonl'), 'utf8')).toBe(before)
    expect(readFileSync(join(handle.dir, 'summaries.jsonl'), 'utf8')).toBe('')
    const retry = await compact(plan, extractiveSummarizer(), handle, new Date())
    expect(retry.record.method).toBe('extractive')
    await handle.fail('test over')
  })
})

describe('prune', () => {
  const window: WindowMessage[] = [
    { role: 'system', content: 'sys' },
    { role: 'user', content: 'turn 1' },
    { role: 'assistant', content: 'reading', tool_calls: [{ id: 'a', type: 'function', function: { name: 'read', arguments: '{"p":1}' } }] },
    { role: 'tool', content: '[blob:abc123] 40 KB of file', tool_call_id: 'a' },
    { role: 'tool', content: 'old output', tool_call_id: 'a' },
    { role: 'user', content: 'turn 2' },
    { role: 'tool', content: 'middle output' },
    { role: 'user', content: 'turn 3' },
    { role: 'tool', content: 'recent output' },
    { role: 'user', content: 'turn 4' },
    { role: 'tool', content: 'newest output' },
  ]

  it('prunes only tool results older than the protected user turns, keeping blob references', () => {
    const pruned = prune(window, 3)
    expect(pruned.map((m) => m.content)).toEqual([
      'sys',
      'turn 1',
      'reading',
      '[pruned] [blob:abc123]',
      '[pruned]',
      'turn 2',
      'middle output',
      'turn 3',
      'recent output',
      'turn 4',
      'newest output',
    ])
    expect(pruned[2]?.tool_calls).toEqual(window[2]?.tool_calls)
    expect(
      prune(window, 1)
        .map((m) => m.content)
        .filter((c) => c.includes('[pruned]')),
    ).toHaveLength(4)
  })

  it('is idempotent, never changes its input, and prunes reasoning too', () => {
    const copy = structuredClone(window)
    const once = prune(window, 2)
    expect(prune(once, 2)).toEqual(once)
    expect(window).toEqual(copy)
    const withReasoning = [
      { role: 'assistant', content: 'x', reasoning_content: 'long thoughts' },
      { role: 'user', content: 'now' },
    ] as WindowMessage[]
    expect(prune(withReasoning, 1)[0]).toMatchObject({ content: 'x', reasoning_content: '[pruned]' })
    expect(prune(window, 10)).toEqual(window)
  })
})

describe('extractive summary', () => {
  it('keeps the task, planted file paths, errors, decisions and tools', () => {
    const messages = [
      msg(2, 'user', { content: TASK }),
      msg(3, 'assistant', {
        content: 'Reading the session code.',
        tool_calls: [{ id: 'c', type: 'function', function: { name: 'read_file', arguments: '{"path":"src/auth/session.ts"}' } }],
      }),
      msg(4, 'tool', { tool_name: 'read_file', content: 'export const TTL = 300 // see config/auth.yaml' }),
      msg(5, 'tool', { tool_name: 'run_tests', content: 'FAIL test/auth.test.ts\nTypeError: Cannot read properties of undefined (reading "exp")' }),
      msg(6, 'assistant', { content: 'We decided to refresh the token instead of extending TTL, because the TTL is a security requirement.' }),
    ]
    const text = extractiveSummary('## Key Discoveries\n- Files: lib/legacy/cookie.js', messages, messages[0] ?? null)
    expect(text).toContain(`## Original Task\n${TASK}`)
    for (const path of ['src/auth/session.ts', 'config/auth.yaml', 'test/auth.test.ts', 'lib/legacy/cookie.js']) expect(text).toContain(path)
    expect(text).toContain('TypeError: Cannot read properties of undefined')
    expect(text).toContain('Decision: We decided to refresh the token')
    expect(text).toContain('read_file ×1')
    expect(text).toMatch(/## Completed Work[\s\S]*## Key Discoveries[\s\S]*## Current State/)
  })
})

describe('final summary', () => {
  async function taskWith(messages: (h: TaskHandle) => void): Promise<TaskHandle> {
    const handle = await createTask(
      { layout: new Layout(makeTree().base), config: parseConfig(''), index: null, now: () => new Date(), warn: () => undefined },
      { task_key: { task_source: 'local', owner: 'me', repo: 'app', task_type: 'task', task_id: '8' }, user: null },
    )
    messages(handle)
    return handle
  }

  it('a long window that does not fit one request: two requests, the second folding in the first, each with the summary budget as max_tokens', async () => {
    const fake = await startFakeLlm()
    let n = 0
    fake.fallback = () => ({
      content: `part summary ${++n}`,
      usage: { prompt_tokens: 900, completion_tokens: 30, total_tokens: 930, prompt_tokens_details: { cached_tokens: 256 } },
    })
    const handle = await taskWith((h) => {
      h.addMessage({ role: 'system', content: 'You are a coding agent.' })
      h.addMessage({ role: 'user', content: TASK })
      for (let i = 0; i < 60; i++) h.addMessage({ role: 'assistant', content: `step ${i}: ${'z'.repeat(300)}` })
    })
    // A 4,000-token model: half of it per request, ~18,000 characters of steps.
    const client = requireLlmClient(parseConfig(fake.configYaml().replace('context_length: 8000', 'context_length: 4000')))
    const { text, usage } = await createFinalSummary(handle.dir, client, 600)
    expect(fake.requests).toHaveLength(2)
    expect(text).toBe('part summary 2')
    expect(fake.requests[0]?.body.messages[1]?.content).toContain(TASK)
    expect(fake.requests[0]?.body.messages[1]?.content).not.toContain('You are a coding agent.')
    expect(fake.requests[1]?.body.messages[1]?.content).toContain('<previous_summary>\npart summary 1')
    // The newest step is in the second request.
    expect(fake.requests[1]?.body.messages[1]?.content).toContain('step 59')
    for (const r of fake.requests) expect(r.body.max_tokens).toBe(600)
    expect(usage).toEqual({ requests: 2, prompt_tokens: 1800, completion_tokens: 60, cached_tokens: 512 })
    await handle.complete(text)
  })

  it('after compactions: one request from the latest running summary and the messages after it, old tool outputs as short heads', async () => {
    const fake = await startFakeLlm()
    fake.fallback = () => ({ content: '## Task\nthe login bug' })
    const handle = await taskWith((h) => {
      h.addMessage({ role: 'system', content: 'You are a coding agent.' })
      h.addMessage({ role: 'user', content: TASK })
      for (let r = 0; r < 300; r++) {
        h.addMessage({
          role: 'assistant',
          content: '',
          tool_calls: [{ id: `c${r}`, type: 'function', function: { name: 'read_file', arguments: `{"path":"f${r}.ts"}` } }],
        })
        h.addMessage({ role: 'tool', content: `OLD${r} ${'o'.repeat(9000)}`, tool_call_id: `c${r}`, tool_name: 'read_file' })
      }
      h.addSummary({
        start_seq: 3,
        end_seq: 602,
        summary: '## Original Task\nthe login bug\n## Current State\n- read 299 files',
        created_at: new Date().toISOString(),
        original_tokens: 1,
        summary_tokens: 1,
        compression_ratio: 1,
        compressed_message_count: 598,
        tokens_saved: 0,
        method: 'llm',
        model: 'fake-model',
      })
      for (let r = 300; r < 310; r++) {
        h.addMessage({
          role: 'assistant',
          content: '',
          tool_calls: [{ id: `c${r}`, type: 'function', function: { name: 'read_file', arguments: `{"path":"f${r}.ts"}` } }],
        })
        h.addMessage({ role: 'tool', content: `NEW${r} ${'n'.repeat(9000)} TAIL${r}`, tool_call_id: `c${r}`, tool_name: 'read_file' })
      }
    })
    const client = requireLlmClient(parseConfig(fake.configYaml()))
    await createFinalSummary(handle.dir, client)
    expect(fake.requests).toHaveLength(1)
    const sent = fake.requests[0]?.body.messages[1]?.content ?? ''
    expect(sent).toContain('<previous_summary>\n## Original Task\nthe login bug')
    expect(sent).toContain(TASK)
    expect(sent).not.toContain('OLD')
    expect(sent).toContain('NEW309')
    // A head of each output, not the output.
    expect(sent).not.toContain('TAIL309')
    expect(sent.length).toBeLessThan(10 * 1200)
    await handle.complete('done')
  })
})

describe('extractive summaries that nest (issue 19, item 15)', () => {
  it('stay as clean as the first: no repeats, no passing test line as an error, no product name as a file, work carried over, newest first', () => {
    const round = (seq: number, text: string, tool: string) => [
      msg(seq, 'assistant', {
        content: text,
        tool_calls: [{ id: `c${seq}`, type: 'function', function: { name: 'run_command', arguments: '{"command":"npm test"}' } }],
      }),
      msg(seq + 1, 'tool', { tool_name: 'run_command', content: tool }),
    ]
    const task = msg(1, 'user', { content: TASK })
    const first = extractiveSummary(null, [task, ...round(2, 'Running on Node.js 20.', 'Error: cannot find module src/old.ts')], task)
    const second = extractiveSummary(first, round(4, 'Fixed the import in src/new.ts.', '19 passed, 0 failed'), task)
    const third = extractiveSummary(second, round(6, 'We decided to keep the cache because it is hot.', 'TypeError: x is undefined in lib/cache.js'), task)
    expect(third).not.toMatch(/Error: -|- Error: - Error|Error: Error: Error/)
    expect(third).not.toMatch(/Error: 19 passed/)
    expect(third).not.toMatch(/Files:.*Node\.js/)
    // The first summary's work is still there after two more.
    expect(third).toContain('Summarized messages 1-3')
    expect(third).toContain('Summarized messages 4-5')
    // Newest first: the newest error before the oldest.
    expect(third.indexOf('TypeError: x is undefined')).toBeLessThan(third.indexOf('cannot find module src/old.ts'))
    expect(third).toContain('src/old.ts')
    expect(third.match(/## Key Discoveries/g)).toHaveLength(1)
  })
})
