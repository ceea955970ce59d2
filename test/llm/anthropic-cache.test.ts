import { describe, expect, it } from 'vitest'
import { messagesRequest } from '../../src/llm/anthropic-request.js'
import type { MessagesRequest } from '../../src/llm/anthropic-request.js'
import type { ChatMessage } from '../../src/llm/client.js'
import { parseConfig } from '../../src/config/load.js'
import { requireLlmClient } from '../../src/llm/providers.js'
import { llmSummarizer, finalSummary } from '../../src/context/summarizer.js'
import { startFakeAnthropic } from '../helpers/fake-anthropic.js'

/** A conversation of `rounds` tool rounds, the first `pruned` of them pruned to stubs (as prune does). */
function conversation(rounds: number, pruned: number): ChatMessage[] {
  const out: ChatMessage[] = [
    { role: 'system', content: 'you code' },
    { role: 'user', content: 'fix it' },
  ]
  for (let i = 0; i < rounds; i++) {
    out.push({
      role: 'assistant',
      content: null,
      tool_calls: [{ id: `call_${i}`, type: 'function', function: { name: 'read_file', arguments: `{"path":"f${i}"}` } }],
    })
    out.push({ role: 'tool', tool_call_id: `call_${i}`, content: i < pruned ? '[pruned]' : `contents of f${i}` })
  }
  return out
}

/** Where the breakpoints are: `system`, the tool_use_id of a result, or `m<i>:<j>` for another block. */
function marks(body: MessagesRequest): string[] {
  const out: string[] = []
  if (body.system?.some((b) => b.cache_control)) out.push('system')
  body.messages.forEach((m, i) =>
    m.content.forEach((b, j) => {
      if (!b.cache_control) return
      out.push(b.type === 'tool_result' ? b.tool_use_id : `m${i}:${j}`)
    }),
  )
  return out
}

describe("Anthropic's cache breakpoints across a prune step", () => {
  it('the boundary moved 12 rounds (24 blocks, past the 20 the API looks back): the previous boundary keeps a breakpoint, where the cache holds the prefix', () => {
    const before = messagesRequest('m', conversation(20, 5), undefined, 100, undefined, { cache: true, previousStub: 'call_4' })
    expect(before.stub).toBe('call_4')
    // Unmoved: system, the boundary, where the previous request ended, the end.
    expect(marks(before)).toEqual(['system', 'call_4', 'call_18', 'call_19'])
    const step = messagesRequest('m', conversation(21, 17), undefined, 100, undefined, { cache: true, previousStub: 'call_4' })
    expect(step.stub).toBe('call_16')
    expect(marks(step)).toEqual(['system', 'call_4', 'call_16', 'call_20'])
    expect(marks(step)).toHaveLength(4)
    // The next request, the boundary where it stays: as before the step.
    const after = messagesRequest('m', conversation(22, 17), undefined, 100, undefined, { cache: true, previousStub: 'call_16' })
    expect(marks(after)).toEqual(['system', 'call_16', 'call_20', 'call_21'])
  })

  it('a request that caches nothing (a summary) has no breakpoint at all', () => {
    const body = messagesRequest('m', conversation(20, 5), [{ type: 'function', function: { name: 'f' } }], 100, undefined, {
      cache: false,
      previousStub: 'call_4',
    })
    expect(JSON.stringify(body)).not.toContain('cache_control')
    expect(body.stub).toBeUndefined()
  })

  it('compaction and final-summary requests go without cache_control through the real client', async () => {
    const fake = await startFakeAnthropic()
    fake.fallback = () => ({ content: '## Original Task\nsummary' })
    const client = requireLlmClient(parseConfig(fake.configYaml()))
    const messages = conversation(6, 0).map((m, i) => ({ ...m, seq: i + 1, timestamp: '2024-01-01T00:00:00Z', content: m.content ?? '' })) as never
    await llmSummarizer(client).summarize(null, messages, null)
    await finalSummary(client, 'earlier', messages)
    expect(fake.requests.length).toBeGreaterThanOrEqual(2)
    for (const r of fake.requests) expect(r.raw.toString()).not.toContain('cache_control')
  })
})
