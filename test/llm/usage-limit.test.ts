import { describe, expect, it } from 'vitest'
import {
  LIMIT_UNTIL_HEADER,
  limitResetMs,
  limitUntilOf,
  MAX_LIMIT_MS,
  markUsageLimit,
  parseResetDuration,
  providerResetMs,
  retryAfterMs,
} from '../../src/llm/usage-limit.js'

const NOW = Date.parse('2026-11-28T10:00:00.000Z')

describe('the reset of a usage limit, from what providers send', () => {
  it('Retry-After in seconds and as an HTTP date, and retry-after-ms', () => {
    expect(retryAfterMs(new Headers({ 'retry-after': '75' }), NOW)).toBe(75_000)
    expect(retryAfterMs(new Headers({ 'retry-after': '1.5' }), NOW)).toBe(1500)
    expect(retryAfterMs(new Headers({ 'retry-after': 'Sat, 28 Nov 2026 11:00:00 GMT' }), NOW)).toBe(3_600_000)
    // A date already past: no wait.
    expect(retryAfterMs(new Headers({ 'retry-after': 'Sat, 28 Nov 2026 09:00:00 GMT' }), NOW)).toBe(0)
    expect(retryAfterMs(new Headers({ 'retry-after-ms': '2500' }), NOW)).toBe(2500)
    // retry-after-ms is the finer of the two.
    expect(retryAfterMs(new Headers({ 'retry-after-ms': '2500', 'retry-after': '3' }), NOW)).toBe(2500)
    expect(retryAfterMs(new Headers({ 'retry-after': 'soon' }), NOW)).toBeNull()
    expect(retryAfterMs(new Headers(), NOW)).toBeNull()
  })

  it("OpenAI's reset durations", () => {
    expect(parseResetDuration('6m0s')).toBe(360_000)
    expect(parseResetDuration('1s')).toBe(1000)
    expect(parseResetDuration('20ms')).toBe(20)
    expect(parseResetDuration('1h2m3.5s')).toBe(3_723_500)
    expect(parseResetDuration('17')).toBe(17_000)
    expect(parseResetDuration('6 minutes')).toBeNull()
    expect(parseResetDuration('')).toBeNull()
    // The exhausted limit's reset, not the other's.
    const openai = new Headers({
      'x-ratelimit-reset-requests': '1s',
      'x-ratelimit-remaining-requests': '59',
      'x-ratelimit-reset-tokens': '6m0s',
      'x-ratelimit-remaining-tokens': '0',
    })
    expect(providerResetMs(openai, NOW)).toBe(360_000)
    // None said exhausted: the latest.
    expect(providerResetMs(new Headers({ 'x-ratelimit-reset-requests': '20ms', 'x-ratelimit-reset-tokens': '2s' }), NOW)).toBe(2000)
  })

  it("Anthropic's reset times (RFC 3339)", () => {
    const anthropic = new Headers({
      'anthropic-ratelimit-requests-reset': '2026-11-28T10:00:30Z',
      'anthropic-ratelimit-requests-remaining': '10',
      'anthropic-ratelimit-input-tokens-reset': '2026-11-28T15:00:00Z',
      'anthropic-ratelimit-input-tokens-remaining': '0',
    })
    expect(providerResetMs(anthropic, NOW)).toBe(5 * 3_600_000)
    // Retry-After, when sent, is the server's own answer.
    anthropic.set('retry-after', '40')
    expect(limitResetMs(anthropic, NOW)).toBe(40_000)
  })

  it('a 429 or 529 whose reset is beyond the longest wait is marked (not retried, with its time); a near one or another status is not', () => {
    const far = new Headers({ 'retry-after': '3600' })
    markUsageLimit(429, far, 60_000, NOW)
    expect(far.get('x-should-retry')).toBe('false')
    expect(far.get(LIMIT_UNTIL_HEADER)).toBe('2026-11-28T11:00:00.000Z')
    expect(limitUntilOf({ headers: far })?.toISOString()).toBe('2026-11-28T11:00:00.000Z')
    const overloaded = new Headers({ 'anthropic-ratelimit-tokens-reset': '2026-11-28T12:00:00Z' })
    markUsageLimit(529, overloaded, 60_000, NOW)
    expect(overloaded.get(LIMIT_UNTIL_HEADER)).toBe('2026-11-28T12:00:00.000Z')
    for (const [status, headers] of [
      [429, new Headers({ 'retry-after': '30' })],
      [500, new Headers({ 'retry-after': '3600' })],
      [429, new Headers()],
    ] as const) {
      markUsageLimit(status, headers, 60_000, NOW)
      expect(headers.has(LIMIT_UNTIL_HEADER)).toBe(false)
      expect(headers.has('x-should-retry')).toBe(false)
    }
    expect(limitUntilOf(new Error('x'))).toBeNull()
  })

  it('an absurd reset (ten years, or past what a date holds) is a month at most, and never throws', () => {
    const absurd: Record<string, string>[] = [
      { 'retry-after-ms': '9'.repeat(400) },
      { 'retry-after': '99999999999999' },
      { 'retry-after': '315360000' },
      { 'x-ratelimit-reset-requests': '99999999999999h', 'x-ratelimit-remaining-requests': '0' },
      { 'anthropic-ratelimit-requests-reset': '+275760-09-13T00:00:00.000Z' },
    ]
    for (const sent of absurd) {
      const headers = new Headers(sent)
      expect(limitResetMs(headers, NOW)).toBe(MAX_LIMIT_MS)
      markUsageLimit(429, headers, 60_000, NOW)
      expect(headers.get(LIMIT_UNTIL_HEADER)).toBe(new Date(NOW + MAX_LIMIT_MS).toISOString())
    }
    // Negative, garbage and a date in the past: no limit to wait out.
    for (const sent of [{ 'retry-after': '-5' }, { 'retry-after': 'garbage' }, { 'retry-after': 'Wed, 21 Oct 2015 07:28:00 GMT' }]) {
      const headers = new Headers(sent)
      markUsageLimit(429, headers, 60_000, NOW)
      expect(headers.get(LIMIT_UNTIL_HEADER)).toBeNull()
    }
  })
})
