import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it, vi } from 'vitest'
import { compressionLimit, settingsFrom } from '../../src/context/compaction.js'
import { compressIfNeeded, requestMessages } from '../../src/context/request.js'
import type { PruneMemo } from '../../src/context/request.js'
import { extractiveSummarizer, llmSummarizer } from '../../src/context/summarizer.js'
import { parseConfig } from '../../src/config/load.js'
import { requireLlmClient } from '../../src/llm/providers.js'
import { Layout } from '../../src/storage/fs/layout.js'
import type { WindowMessage } from '../../src/storage/format/records.js'
import { readState } from '../../src/storage/task/state.js'
import { createTask, resumeTask } from '../../src/storage/task/lifecycle.js'
import { resolveTask } from '../../src/storage/fs/layout.js'
import { estimateMessageTokens } from '../../src/storage/format/tokens.js'
import { makeTree } from '../fixtures/tree.js'
import { startFakeLlm } from '../helpers/fake-llm.js'

describe('requestMessages', () => {
  const call = (id: string): WindowMessage => ({
    role: 'assistant',
    content: '',
    tool_calls: [{ id, type: 'function', function: { name: 'run', arguments: '{}' } }],
  })
  const window: WindowMessage[] = [
    { role: 'system', content: 'sys' },
    { role: 'user', content: 'the task' },
    { role: 'user', content: '[Summary …] earlier work' },
    call('a'),
    { role: 'tool', content: 'x'.repeat(4000), tool_call_id: 'a' },
    call('b'),
    { role: 'tool', content: 'y'.repeat(400), tool_call_id: 'b' },
    { role: 'assistant', content: 'done with b' },
  ]

  it('keeps the head and the newest messages within the limit, never starting on an orphaned tool result', () => {
    const all = requestMessages(window, 100_000, 3)
    expect(all.messages).toEqual(window)
    expect(all.dropped).toBe(0)
    const tight = requestMessages(window, 200, 3)
    // What was left out is said in the request, right after the head.
    expect(tight.dropped).toBeGreaterThan(0)
    expect(tight.messages[3]?.content).toMatch(/earlier message\(s\) of this task are left out/)
    expect(tight.messages.slice(4).map((m) => m.content.slice(0, 12))).toEqual(['', 'y'.repeat(12), 'done with b'])
    const tighter = requestMessages(window, 120, 3)
    expect(tighter.messages[4]?.role).not.toBe('tool')
    expect(tighter.messages.slice(0, 3)).toEqual(window.slice(0, 3))
  })
})

describe('compressIfNeeded', () => {
  async function task() {
    const handle = await createTask(
      { layout: new Layout(makeTree().base), config: parseConfig(''), index: null, now: () => new Date(), warn: () => undefined },
      { task_key: { task_source: 'local', owner: 'me', repo: 'app', task_type: 'task', task_id: '9' }, user: null },
    )
    handle.addMessage({ role: 'system', content: 'sys' })
    handle.addMessage({ role: 'user', content: 'the task' })
    for (let i = 0; i < 30; i++)
      handle.addMessage({ role: i % 2 ? 'tool' : 'user', content: `step ${i} ${'z'.repeat(300)}`, ...(i % 2 ? { tool_name: 'run' } : {}) })
    return handle
  }

  // Issue 22: a turn prunes and estimates only what changed since the last plan of the same window.
  it('plans a growing window from what the last plan pruned exactly as from scratch', () => {
    const policy = { protectedTurns: 3, protectedToolRounds: 5 }
    const memo: PruneMemo = {}
    const window: WindowMessage[] = [
      { role: 'system', content: 'sys' },
      { role: 'user', content: 'task' },
    ]
    const looked = vi.spyOn(WeakMap.prototype, 'get')
    let last = 0
    try {
      for (let turn = 0; turn < 300; turn++) {
        window.push({
          role: 'assistant',
          content: `step ${turn}`,
          tool_calls: [{ id: `c${turn}`, type: 'function', function: { name: 'read_file', arguments: '{}' } }],
        })
        window.push({ role: 'tool', content: `[blob:b${turn}] ${'r'.repeat(turn % 5 === 0 ? 9000 : 40)}`, tool_call_id: `c${turn}` })
        if (turn % 40 === 39) window.push({ role: 'user', content: `comment ${turn}` })
        for (const limit of [2000, 1_000_000]) {
          looked.mockClear()
          const planned = requestMessages(window, limit, policy, memo)
          last = looked.mock.calls.length
          expect(planned).toEqual(requestMessages(window, limit, policy))
        }
      }
    } finally {
      looked.mockRestore()
    }
    // The window holds over 600 messages; the last plan looked up only a handful.
    expect(window.length).toBeGreaterThan(600)
    expect(last).toBeLessThan(100)
    // A window replaced whole (a compaction) is planned from scratch.
    const replaced = window.slice(0, 20)
    expect(requestMessages(replaced, 1_000_000, policy, memo)).toEqual(requestMessages(replaced, 1_000_000, policy))
  })

  it('compresses over the limit with status compressing meanwhile, and not under it', async () => {
    const handle = await task()
    const settings = settingsFrom(parseConfig(''))
    const warnings: string[] = []
    const statuses: string[] = []
    const fake = await startFakeLlm()
    fake.fallback = () => {
      statuses.push(readState(handle.dir)?.status ?? '')
      return { content: '## Original Task\nthe task' }
    }
    const base = {
      summarizer: llmSummarizer(requireLlmClient(parseConfig(fake.configYaml()))),
      settings,
      now: () => new Date(),
      warn: (m: string) => warnings.push(m),
    }
    expect(await compressIfNeeded(handle, { ...base, limit: 1_000_000 })).toBeNull()
    const result = await compressIfNeeded(handle, {
      ...base,
      limit: compressionLimit(parseConfig('context:\n  compression:\n    token_threshold: 500\n'), 8000),
    })
    expect(result?.record.summary_id).toBe(1)
    expect(statuses).toEqual(['compressing'])
    expect(readState(handle.dir)).toMatchObject({ status: 'processing', compression_count: 1, last_activity: 'compressed' })
    expect(warnings).toEqual([])
    await handle.fail('over')
  })

  it('keeps the in-memory window equal to current.jsonl through appends, compaction and resume', async () => {
    const handle = await task()
    const fromDisk = (dir: string) =>
      readFileSync(join(dir, 'current.jsonl'), 'utf8')
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l) as WindowMessage)
    expect(handle.window()).toEqual(fromDisk(handle.dir))
    await compressIfNeeded(handle, {
      summarizer: extractiveSummarizer(),
      settings: settingsFrom(parseConfig('')),
      limit: 100,
      now: () => new Date(),
      warn: () => undefined,
    })
    handle.addMessage({ role: 'user', content: 'after compaction' })
    handle.addMessage({ role: 'system', content: 'hidden', visible: false })
    expect(handle.window()).toEqual(fromDisk(handle.dir))
    expect(handle.windowTokens()).toBe(handle.window().reduce((sum, m) => sum + estimateMessageTokens(m), 0))
    const env = { layout: new Layout(join(handle.dir, '..', '..')), config: parseConfig(''), index: null, now: () => new Date(), warn: () => undefined }
    await handle.pause()
    const resumed = await resumeTask(env, resolveTask(env.layout, handle.uuid))
    expect(resumed.window()).toEqual(fromDisk(resumed.dir))
    await resumed.fail('over')
  })

  it('is best effort: a failing LLM leaves everything as it was, with a warning', async () => {
    const handle = await task()
    const fake = await startFakeLlm()
    fake.fallback = () => ({ status: 500, headers: { 'retry-after-ms': '1' } })
    const before = readFileSync(join(handle.dir, 'current.jsonl'), 'utf8')
    const warnings: string[] = []
    const result = await compressIfNeeded(handle, {
      summarizer: llmSummarizer(requireLlmClient(parseConfig(fake.configYaml()))),
      settings: settingsFrom(parseConfig('')),
      limit: 100,
      now: () => new Date(),
      warn: (m) => warnings.push(m),
    })
    expect(result).toBeNull()
    expect(warnings[0]).toMatch(/failed; the window stays as it was/)
    expect(readFileSync(join(handle.dir, 'current.jsonl'), 'utf8')).toBe(before)
    expect(readState(handle.dir)?.status).toBe('processing')
    expect(
      (
        await compressIfNeeded(handle, {
          summarizer: extractiveSummarizer(),
          settings: settingsFrom(parseConfig('')),
          limit: 100,
          now: () => new Date(),
          warn: () => undefined,
        })
      )?.record.method,
    ).toBe('extractive')
    await handle.fail('over')
  })
})
