import { describe, expect, it } from 'vitest'
import { taskRow } from '../../../src/storage/task/row.js'
import { parseState, stateRepairs } from '../../../src/storage/task/state.js'
import type { TaskMetadata } from '../../../src/storage/task/metadata.js'
import { cleanCounts } from '../../../src/storage/task/state-counts.js'

/** A state.json as an older version wrote it after believing a hostile server (1e308 summed to Infinity is null in JSON). */
const BAD = {
  status: 'completed',
  started_at: '2024-01-15T10:30:00.000Z',
  updated_at: '2024-01-15T10:31:00.000Z',
  completed_at: '2024-01-15T10:31:00.000Z',
  llm_call_count: 2.5,
  tool_call_count: 1,
  total_tokens_used: null,
  prompt_tokens: 1200,
  completion_tokens: 300,
  cached_tokens: '12',
  cache_write_tokens: -7,
  current_context_tokens: 1e20,
  compression_count: 0,
  turns: 1e308,
  final_summary_tokens: { requests: 1, prompt_tokens: -5, completion_tokens: 10, cached_tokens: 0 },
  compaction_tokens: 'lots',
}

describe("a state.json's counters", () => {
  it('that are not whole numbers from 0 are read as 0 (or absent), and what changed is kept for a report', () => {
    const state = parseState(JSON.stringify(BAD), '/x/state.json')
    expect(state).toMatchObject({
      llm_call_count: 0,
      tool_call_count: 1,
      total_tokens_used: 1500,
      prompt_tokens: 1200,
      completion_tokens: 300,
      current_context_tokens: 0,
      compression_count: 0,
    })
    expect(state.cached_tokens).toBeUndefined()
    expect(state.cache_write_tokens).toBeUndefined()
    expect(state.turns).toBeUndefined()
    expect(state.compaction_tokens).toBeUndefined()
    expect(state.final_summary_tokens).toEqual({ requests: 1, prompt_tokens: 0, completion_tokens: 10, cached_tokens: 0 })
    expect(stateRepairs(state)).toEqual([
      'cached_tokens "12" → absent',
      'cache_write_tokens -7 → absent',
      'turns 1e+308 → absent',
      'llm_call_count 2.5 → 0',
      'total_tokens_used null → 1500',
      'current_context_tokens 100000000000000000000 → 0',
      'final_summary_tokens.prompt_tokens -5 → 0',
      'compaction_tokens "lots" → absent',
    ])
  })

  it('a sound file is read as it is, nothing reported', () => {
    const sound = {
      ...BAD,
      llm_call_count: 2,
      total_tokens_used: 1500,
      cached_tokens: 12,
      cache_write_tokens: 7,
      current_context_tokens: 900,
      turns: 2,
      final_summary_tokens: { requests: 1, prompt_tokens: 5, completion_tokens: 10, cached_tokens: 0 },
      compaction_tokens: undefined,
    }
    const state = parseState(JSON.stringify(sound), '/x/state.json')
    expect(state).toMatchObject({ llm_call_count: 2, total_tokens_used: 1500, cached_tokens: 12, cache_write_tokens: 7, turns: 2 })
    expect(stateRepairs(state)).toEqual([])
    expect(cleanCounts({ llm_call_count: 0, tool_call_count: 0, total_tokens_used: 0, current_context_tokens: 0, compression_count: 0 })).toEqual([])
  })

  it("the index row holds only whole numbers PostgreSQL's bigint and /metrics take, whatever state it is given", () => {
    const meta = { uuid: 'u', user: 'me', created_at: '2024-01-15T10:30:00.000Z' } as TaskMetadata
    const hostile = {
      ...BAD,
      llm_call_count: -1,
      total_tokens_used: 1e20,
      prompt_tokens: '5',
      completion_tokens: Number.NaN,
      cached_tokens: 2 ** 60,
      compression_count: 0.5,
      current_context_tokens: -3,
      cache_write_tokens: 1e300,
      compaction_tokens: 'many',
      final_summary_tokens: { requests: -2 },
    }
    const row = taskRow(meta, hostile as never, 'completed', { messages: 3, summaries: 1, tools: 1 })
    expect(row).toMatchObject({
      llm_call_count: 0,
      total_tokens: 0,
      prompt_tokens: 0,
      completion_tokens: 0,
      cached_tokens: 0,
      cache_write_tokens: 0,
      summary_calls: 0,
      final_summary_calls: 0,
      compression_count: 1,
      final_token_count: null,
    })
    // Sound figures pass as they are.
    const sound = { ...hostile, cache_write_tokens: 7, compaction_tokens: { requests: 3 }, final_summary_tokens: { requests: 1 } }
    expect(taskRow(meta, sound as never, 'completed', { messages: 3, summaries: 1, tools: 1 })).toMatchObject({
      cache_write_tokens: 7,
      summary_calls: 3,
      final_summary_calls: 1,
    })
  })
})
