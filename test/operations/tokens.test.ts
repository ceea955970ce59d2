import { describe, expect, it } from 'vitest'
import { parseConfig } from '../../src/config/load.js'
import { costOf, requestsCost, splitOf } from '../../src/operations/tokens.js'

const pricing = parseConfig(
  'pricing:\n  sonnet: { prompt: 3, completion: 15, cached: 0.3, cache_write: 3.75 }\n  plain: { prompt: 2, completion: 8 }\n',
).pricing

describe('cost as providers bill it (issue 30)', () => {
  it('cached input at the cached rate, cache writes at the write rate, the rest at the prompt rate', () => {
    // 1 M prompt tokens: 700k cached, 100k written, 200k plain; 10k completion.
    const split = { prompt: 1_000_000, completion: 10_000, cached: 700_000, cache_write: 100_000 }
    expect(costOf('sonnet', split, pricing)).toBeCloseTo(0.21 + 0.375 + 0.6 + 0.15, 6)
    // A model without cache rates bills all input at its prompt price.
    expect(costOf('plain', split, pricing)).toBeCloseTo(2 + 0.08, 6)
    // No price: tokens only.
    expect(costOf('unknown', split, pricing)).toBeNull()
    // Counts that do not add up never bill more input than was sent.
    expect(costOf('sonnet', { prompt: 100, completion: 0, cached: 80, cache_write: 500 }, pricing)).toBeCloseTo((80 * 0.3 + 20 * 3.75) / 1e6, 9)
  })

  it("a state.json's split, cache writes where recorded; summary requests' cost apart", () => {
    expect(splitOf({ total_tokens_used: 10, prompt_tokens: 8, completion_tokens: 2, cached_tokens: 4 })).toEqual({
      total: 10,
      prompt: 8,
      completion: 2,
      cached: 4,
    })
    expect(splitOf({ total_tokens_used: 10, prompt_tokens: 8, completion_tokens: 2, cached_tokens: 4, cache_write_tokens: 3 })).toMatchObject({
      cache_write: 3,
    })
    const usage = { requests: 2, prompt_tokens: 20_000, completion_tokens: 1_000, cached_tokens: 10_000 }
    expect(requestsCost('sonnet', usage, pricing)).toEqual({ requests: 2, prompt: 20_000, completion: 1_000, cached: 10_000, cost_usd: 0.048 })
    expect(requestsCost('unknown', usage, pricing)).toMatchObject({ requests: 2, cost_usd: null })
    expect(requestsCost('sonnet', undefined, pricing)).toBeNull()
  })
})
