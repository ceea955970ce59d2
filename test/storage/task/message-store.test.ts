import { readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { readJsonl } from '../../../src/storage/format/jsonl.js'
import { MessageStore } from '../../../src/storage/task/message-store.js'
import { estimateMessageTokens } from '../../../src/storage/format/tokens.js'
import { normalizeMessage, normalizeSummary, toWindowMessage } from '../../../src/storage/format/records.js'
import { PlanningStore, SummaryStore, ToolStore } from '../../../src/storage/task/stores.js'
import { makeTree } from '../../fixtures/tree.js'

const fixed = () => new Date('2024-01-15T10:30:00.000Z')

function lines(path: string): Record<string, unknown>[] {
  return readFileSync(path, 'utf8')
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as Record<string, unknown>)
}

describe('MessageStore', () => {
  it('assigns seq, masks, estimates tokens and mirrors visible messages to current.jsonl', () => {
    const dir = makeTree().base
    const store = MessageStore.open(dir, { now: fixed })
    store.add({ role: 'system', content: 'You are a coding agent' })
    store.add({ role: 'system', content: 'session started', visible: false })
    store.add({ role: 'user', content: 'Fix it, my key is ghp_1234567890abcdefghijABCDEFGHIJ123456' })
    store.add({
      role: 'assistant',
      content: '',
      tool_calls: [{ id: 'c1', type: 'function', function: { name: 'read', arguments: '{"path":"a@b.example.com"}' } }],
    })
    store.add({ role: 'tool', content: 'file text', tool_name: 'read', tool_call_id: 'c1' })
    store.close()
    const messages = lines(join(dir, 'messages.jsonl'))
    expect(messages.map((m) => m.seq)).toEqual([1, 2, 3, 4, 5])
    expect(messages[1]).toMatchObject({ visible: false })
    expect(messages[2]).toEqual({ seq: 3, role: 'user', content: 'Fix it, my key is [GITHUB_TOKEN]', timestamp: '2024-01-15T10:30:00.000Z', token_count: 8 })
    expect(JSON.stringify(messages[3])).toContain('[EMAIL]')
    const current = lines(join(dir, 'current.jsonl'))
    expect(current.map((m) => m.role)).toEqual(['system', 'user', 'assistant', 'tool'])
    expect(current[3]).toEqual({ role: 'tool', content: 'file text', tool_name: 'read', tool_call_id: 'c1' })
  })

  it('writes lines identical to JSON.stringify of the stored record', () => {
    const dir = makeTree().base
    const store = MessageStore.open(dir, { now: fixed })
    const calls = [{ id: 'c"1', type: 'function' as const, function: { name: 'run', arguments: '{"cmd":"echo \\"hi\\"\\n"}' } }]
    const stored = [
      store.add({ role: 'user', content: 'quotes " backslash \\ newline \n tab \t unicode 日本 \u2028 emoji 🎉 control \u0001 lone \ud800' }),
      store.add({ role: 'assistant', content: '', tool_calls: calls }),
      store.add({ role: 'tool', content: 'out', tool_name: 'run', tool_call_id: 'c"1' }),
      store.add({ role: 'system', content: 'hidden', visible: false }),
    ]
    store.close()
    const messageText = readFileSync(join(dir, 'messages.jsonl'), 'utf8')
    expect(messageText).toBe(stored.map((m) => `${JSON.stringify(m)}\n`).join(''))
    const currentText = readFileSync(join(dir, 'current.jsonl'), 'utf8')
    expect(currentText).toBe(
      stored
        .slice(0, 3)
        .map((m) => `${JSON.stringify(toWindowMessage(m))}\n`)
        .join(''),
    )
    // Each token count is what estimateMessageTokens gives for the message as stored.
    expect(stored.map((m) => m.token_count)).toEqual(stored.map((m) => estimateMessageTokens({ content: m.content, tool_calls: m.tool_calls })))
  })

  it('continues seq after a restart and after a torn tail, keeping only recent messages in memory', () => {
    const dir = makeTree().base
    const first = MessageStore.open(dir, { memoryMessages: 3 })
    for (let i = 0; i < 10; i++) first.add({ role: 'user', content: `m${i}` })
    first.close()
    writeFileSync(join(dir, 'messages.jsonl'), `${readFileSync(join(dir, 'messages.jsonl'), 'utf8')}{"seq":11,"role":"us`)
    const second = MessageStore.open(dir, { memoryMessages: 3 })
    expect(second.lastSeq).toBe(10)
    expect(second.recent().map((m) => m.seq)).toEqual([8, 9, 10])
    expect(second.add({ role: 'user', content: 'again' }).seq).toBe(11)
    expect(second.recent().map((m) => m.seq)).toEqual([9, 10, 11])
    second.close()
    expect(lines(join(dir, 'messages.jsonl')).map((m) => m.seq)).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11])
  })

  it('replaces current.jsonl atomically and keeps appending to the new file', async () => {
    const dir = makeTree().base
    const store = MessageStore.open(dir)
    store.add({ role: 'user', content: 'one' })
    store.replaceCurrent([{ role: 'user', content: '[summary]' }])
    store.add({ role: 'user', content: 'two' })
    store.close()
    const items = []
    for await (const item of readJsonl(join(dir, 'current.jsonl'))) items.push(item.ok ? item.record.content : null)
    expect(items).toEqual(['[summary]', 'two'])
  })
})

describe('other stores', () => {
  it('write tools.jsonl lines identical to JSON.stringify of the record, a long text result spliced in escaped once', () => {
    const dir = makeTree().base
    const tools = ToolStore.open(dir, { now: fixed })
    const long = `quotes " backslash \\ newline \n tab \t 日本 \u2028 🎉 \u0001 lone \ud800 ${'x'.repeat(2000)} bob@example.com`
    const records = [
      tools.add({ tool_name: 'read_file', arguments: { path: 'a "b".txt' }, result: long, status: 'success', error: null, duration_ms: 12 }),
      tools.add({
        tool_name: 'read_file',
        arguments: { path: 'a' },
        result: long,
        status: 'error',
        error: 'cut ghp_1234567890abcdefghijABCDEFGHIJ123456',
        duration_ms: Number.NaN,
      }),
      tools.add({ tool_name: 'mcp', arguments: {}, result: { structured: [1, 2] }, status: 'success', error: null, duration_ms: 1 }),
      tools.add({ tool_name: 'glob', arguments: { pattern: '*' }, result: 'short', status: 'success', error: null, duration_ms: 0 }),
    ]
    tools.close()
    expect(readFileSync(join(dir, 'tools.jsonl'), 'utf8')).toBe(records.map((r) => `${JSON.stringify(r)}\n`).join(''))
    expect(records.map((r) => r.seq)).toEqual([1, 2, 3, 4])
    expect(records[0]?.result).toContain('[EMAIL]')
    expect(records[1]?.error).toBe('cut [GITHUB_TOKEN]')
  })

  it('number their records and continue after reopening', () => {
    const dir = makeTree().base
    const tools = ToolStore.open(dir, { now: fixed })
    tools.add({ tool_name: 'read', arguments: { token: 'glpat-abcdefghijklmnopqrst' }, result: 'ok', status: 'success', error: null, duration_ms: 3 })
    tools.close()
    const reopened = ToolStore.open(dir, { now: fixed })
    expect(reopened.add({ tool_name: 'write', arguments: {}, result: null, status: 'error', error: 'denied', duration_ms: 1 }).seq).toBe(2)
    reopened.close()
    expect(lines(join(dir, 'tools.jsonl'))[0]).toMatchObject({ seq: 1, arguments: { token: '[GITLAB_TOKEN]' } })

    // A network record (the egress proxy's) goes beside the calls: the seq of the one before it, masked; the next call is still 3.
    const net = ToolStore.open(dir, { now: fixed })
    const connection = net.addNetwork({
      arguments: { by: 'run_command', method: 'CONNECT', host: 'ghp_abcdefghijklmnopqrstuvwxyz0123456789.example', port: 443 },
      result: { allowed: false, address: null, bytes_up: 0, bytes_down: 0 },
      status: 'error',
      error: 'not in tools.allowed_hosts',
      duration_ms: 2,
    })
    expect(connection).toMatchObject({ seq: 2, kind: 'network', tool_name: 'network', arguments: { host: '[GITHUB_TOKEN].example' } })
    net.close()
    const again = ToolStore.open(dir, { now: fixed })
    expect(again.lastSeq).toBe(2)
    expect(again.add({ tool_name: 'read', arguments: {}, result: 'ok', status: 'success', error: null, duration_ms: 1 }).seq).toBe(3)
    again.close()
    expect(lines(join(dir, 'tools.jsonl')).map((r) => [r.seq, r.kind ?? 'call'])).toEqual([
      [1, 'call'],
      [2, 'call'],
      [2, 'network'],
      [3, 'call'],
    ])

    writeFileSync(join(dir, 'summaries.jsonl'), '{"id":4,"summary":"old"}\n')
    const summaries = SummaryStore.open(dir)
    const record = summaries.add({
      start_seq: 1,
      end_seq: 9,
      summary: 's',
      created_at: 'now',
      original_tokens: 100,
      summary_tokens: 10,
      compression_ratio: 0.1,
      compressed_message_count: 9,
      tokens_saved: 90,
      method: 'llm',
      model: 'm',
    })
    expect(record.summary_id).toBe(5)
    summaries.close()

    const plans = PlanningStore.open(dir, { now: fixed })
    expect(plans.add('initial', 'step 1').id).toBe(1)
    expect(plans.add('revision', 'step 2').id).toBe(2)
    plans.close()
  })
})

describe('record normalisation', () => {
  it('reads docs/contract.md §7 aliases into the canonical shape', () => {
    expect(normalizeMessage({ seq: 2, role: 'user', content: 'x', timestamp: 't', tokens: 7 })).toMatchObject({ token_count: 7 })
    const legacy = normalizeMessage({ seq: 3, role: 'assistant', content: '', function_call: { name: 'read', arguments: { path: 'a' } } })
    expect(legacy?.tool_calls).toEqual([{ id: 'call_3', type: 'function', function: { name: 'read', arguments: '{"path":"a"}' } }])
    expect(normalizeMessage({ role: 'robot', content: 'x' })).toBeNull()
    expect(normalizeSummary({ id: 2, summary: 's', tokens_saved: 5000, compressed_message_count: 50 })).toMatchObject({
      summary_id: 2,
      tokens_saved: 5000,
      method: 'llm',
    })
  })
})
