import { describe, expect, it } from 'vitest'
import { parseConfig } from '../../src/config/load.js'
import { checkAnthropicUsage, checkOpenAiUsage, completionBound, promptBound, tokenCount } from '../../src/llm/usage-check.js'
import { requireLlmClient } from '../../src/llm/providers.js'
import { startFakeAnthropic } from '../helpers/fake-anthropic.js'
import { startFakeLlm } from '../helpers/fake-llm.js'

const bounds = { prompt: 50_000, completion: 8_192 }

/** Figures no request can cost, and figures that are not counts at all. */
const HOSTILE: [string, unknown][] = [
  ['negative', -1_000_000],
  ['fractional', 12.5],
  ['1e308', 1e308],
  ['1e20', 1e20],
  ['past the bound', 50_001],
  ['a string', '100'],
  ['null', null],
  ['an object', { n: 1 }],
  ['true', true],
]

describe('a token count from the server', () => {
  it('is a whole number from 0 to the bound', () => {
    expect(tokenCount(0, 10)).toEqual({ ok: true, n: 0 })
    expect(tokenCount(10, 10)).toEqual({ ok: true, n: 10 })
    for (const [, value] of HOSTILE) expect(tokenCount(value, 50_000).ok).toBe(false)
    expect(tokenCount(undefined, 10)).toEqual({ ok: false, why: 'missing' })
    expect(tokenCount(-3, 10)).toEqual({ ok: false, why: '-3 (negative)' })
  })

  it('is bounded by the request: its size (a token is at least a byte) and its max_tokens', () => {
    const small = promptBound([{ role: 'user', content: 'hi' }], undefined)
    const large = promptBound([{ role: 'user', content: 'x'.repeat(400_000) }], undefined)
    // 400,000 characters are at most 1.2 MB of UTF-8: never more tokens than that.
    expect(large - small).toBeGreaterThanOrEqual(1_200_000 - 12)
    expect(large).toBeLessThan(1_300_000)
    expect(promptBound([{ role: 'user', content: 'hi' }], [{ type: 'function', function: { name: 'f', description: 'd'.repeat(1000) } }])).toBeGreaterThan(
      small + 3000,
    )
    expect(completionBound(1500)).toBe(1500 + 4096)
  })
})

describe('OpenAI usage', () => {
  const good = { prompt_tokens: 1200, completion_tokens: 30, total_tokens: 1230 }

  it('a sound report is kept as it is', () => {
    expect(checkOpenAiUsage(good, bounds, undefined)).toEqual({ usage: good, refused: null })
    expect(checkOpenAiUsage(good, bounds, 1000)).toEqual({ usage: { ...good, cached_tokens: 1000 }, refused: null })
    // No report at all: the caller estimates, as it always has, with nothing to warn of.
    expect(checkOpenAiUsage(undefined, bounds, undefined)).toEqual({ usage: null, refused: null })
  })

  for (const field of ['prompt_tokens', 'completion_tokens'] as const) {
    for (const [what, value] of HOSTILE) {
      it(`${field} ${what}: the whole report is refused, and said`, () => {
        const checked = checkOpenAiUsage({ ...good, [field]: value }, bounds, undefined)
        expect(checked.usage).toBeNull()
        expect(checked.refused).toContain(field)
      })
    }
    it(`${field} missing: refused`, () => {
      const { [field]: _gone, ...rest } = good
      expect(checkOpenAiUsage(rest, bounds, undefined)).toEqual({ usage: null, refused: `${field} missing` })
    })
  }

  it('a total below the sum (a budget counted down) is the sum; a bad total or cached count is left out and said', () => {
    expect(checkOpenAiUsage({ ...good, total_tokens: 0 }, bounds, undefined).usage?.total_tokens).toBe(1230)
    expect(checkOpenAiUsage({ ...good, total_tokens: -5 }, bounds, undefined)).toEqual({ usage: good, refused: 'total_tokens -5 (negative)' })
    expect(checkOpenAiUsage(good, bounds, 1201)).toEqual({ usage: good, refused: 'cached_tokens 1201 (more than this request can be)' })
    expect(checkOpenAiUsage(good, bounds, '12')).toEqual({ usage: good, refused: 'cached_tokens a string' })
  })
})

describe('Anthropic usage', () => {
  const good = { input_tokens: 12, output_tokens: 30, cache_creation_input_tokens: 1500, cache_read_input_tokens: 4000 }

  it('a sound report: the prompt is input and the cache', () => {
    expect(checkAnthropicUsage(good, bounds)).toEqual({
      usage: { prompt_tokens: 5512, completion_tokens: 30, total_tokens: 5542, cached_tokens: 4000, cache_write_tokens: 1500 },
      refused: null,
    })
    expect(checkAnthropicUsage({ input_tokens: 5, output_tokens: 5, cache_read_input_tokens: null }, bounds).usage).toEqual({
      prompt_tokens: 5,
      completion_tokens: 5,
      total_tokens: 10,
    })
  })

  for (const field of ['input_tokens', 'output_tokens', 'cache_creation_input_tokens', 'cache_read_input_tokens'] as const) {
    for (const [what, value] of HOSTILE.filter(([w]) => !(w === 'null' && field.startsWith('cache')))) {
      it(`${field} ${what}: refused, and said`, () => {
        const checked = checkAnthropicUsage({ ...good, [field]: value }, bounds)
        expect(checked.usage).toBeNull()
        expect(checked.refused).toContain(field)
      })
    }
  }

  it('input and cache together past the bound: refused', () => {
    expect(checkAnthropicUsage({ input_tokens: 30_000, output_tokens: 1, cache_read_input_tokens: 30_000 }, bounds).usage).toBeNull()
  })
})

describe('both clients check what their server reports', () => {
  it('OpenAI-compatible: a negative count comes back as no usage, with why', async () => {
    const fake = await startFakeLlm()
    fake.queue.push(
      { content: 'ok', usage: { prompt_tokens: -1_000_000, completion_tokens: 5, total_tokens: -999_995 } },
      { content: 'ok', usage: { prompt_tokens: 1e20, completion_tokens: 5, total_tokens: 1e20 } },
    )
    const client = requireLlmClient(parseConfig(fake.configYaml()))
    expect(await client.chat([{ role: 'user', content: 'hi' }])).toMatchObject({ usage: null, usageRefused: 'prompt_tokens -1000000 (negative)' })
    expect(await client.chat([{ role: 'user', content: 'hi' }])).toMatchObject({ usage: null, usageRefused: 'prompt_tokens 100000000000000000000 (too large)' })
  })

  for (const stream of [true, false]) {
    it(`Anthropic (${stream ? 'streamed' : 'whole'}): a fractional or string count comes back as no usage, with why`, async () => {
      const fake = await startFakeAnthropic()
      fake.queue.push(
        { content: 'ok', usage: { input_tokens: 12.5, output_tokens: 3 } },
        { content: 'ok', usage: { input_tokens: 12, output_tokens: 3, cache_read_input_tokens: '4000' } },
      )
      const client = requireLlmClient(parseConfig(fake.configYaml('', { stream })))
      expect(await client.chat([{ role: 'user', content: 'hi' }])).toMatchObject({ usage: null, usageRefused: 'input_tokens 12.5 (not a whole number)' })
      expect(await client.chat([{ role: 'user', content: 'hi' }])).toMatchObject({ usage: null, usageRefused: 'cache_read_input_tokens a string' })
    })
  }
})
