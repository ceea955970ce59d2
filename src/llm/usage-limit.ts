/**
 * A provider's usage limit (docs/running.md#rate-limits): a 429 (or Anthropic's 529,
 * overloaded) whose reset lies further away than a turn should wait
 * (llm.max_retry_wait). The reset is read from what the providers send:
 *
 * - `Retry-After`: seconds, or an HTTP date;
 * - `retry-after-ms`: milliseconds;
 * - OpenAI's `x-ratelimit-reset-requests` / `x-ratelimit-reset-tokens`: a duration such
 *   as `6m0s`, `1s`, `20ms`, `1h2m3.5s`;
 * - Anthropic's `anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-reset`:
 *   an RFC 3339 time.
 *
 * `Retry-After` (either form) is the server's own answer and wins; else the reset of a
 * limit whose `remaining` is 0, else the latest reset given.
 */

/** The header the bounded fetch puts on a response that is a usage limit: when it lifts, ISO 8601 (the SDK is told not to retry it). */
export const LIMIT_UNTIL_HEADER = 'x-ctxagent-limit-until'

/** Statuses that may carry a usage limit: too many requests, and Anthropic's overloaded. */
const LIMIT_STATUSES = new Set([429, 529])

const UNITS: Record<string, number> = { h: 3_600_000, m: 60_000, s: 1000, ms: 1, us: 0.001, µs: 0.001, ns: 0.000001 }

/** OpenAI's reset duration (`6m0s`, `1s`, `20ms`, `1h2m3.5s`) in milliseconds, or null when it is not one. */
export function parseResetDuration(text: string): number | null {
  const trimmed = text.trim()
  if (trimmed === '') return null
  // A bare number: seconds, as some compatible servers send it.
  if (/^\d+(\.\d+)?$/.test(trimmed)) return Number.parseFloat(trimmed) * 1000
  const part = /(\d+(?:\.\d+)?)(ms|us|µs|ns|h|m|s)/gy
  let total = 0
  let at = 0
  for (let match = part.exec(trimmed); match !== null; match = part.exec(trimmed)) {
    total += Number.parseFloat(match[1] as string) * (UNITS[match[2] as string] as number)
    at = part.lastIndex
  }
  return at === trimmed.length && at > 0 ? total : null
}

/** `Retry-After` (seconds or an HTTP date) or `retry-after-ms`, as milliseconds from `now`; null when absent or unreadable. */
export function retryAfterMs(headers: Headers, now: number): number | null {
  const millis = headers.get('retry-after-ms')
  if (millis !== null && /^\s*\d+(\.\d+)?\s*$/.test(millis)) return Number.parseFloat(millis)
  const after = headers.get('retry-after')
  if (after === null) return null
  if (/^\s*\d+(\.\d+)?\s*$/.test(after)) return Number.parseFloat(after) * 1000
  const at = Date.parse(after)
  return Number.isNaN(at) ? null : Math.max(0, at - now)
}

/** The providers' per-limit reset headers, as milliseconds from `now`: the exhausted limits' latest reset, else every limit's latest; null when none. */
export function providerResetMs(headers: Headers, now: number): number | null {
  const all: number[] = []
  const exhausted: number[] = []
  const note = (ms: number | null, remaining: string | null) => {
    if (ms === null || !Number.isFinite(ms)) return
    all.push(ms)
    if (remaining !== null && Number(remaining) === 0) exhausted.push(ms)
  }
  for (const kind of ['requests', 'tokens']) {
    const reset = headers.get(`x-ratelimit-reset-${kind}`)
    if (reset !== null) note(parseResetDuration(reset), headers.get(`x-ratelimit-remaining-${kind}`))
  }
  for (const kind of ['requests', 'tokens', 'input-tokens', 'output-tokens']) {
    const reset = headers.get(`anthropic-ratelimit-${kind}-reset`)
    const at = reset === null ? Number.NaN : Date.parse(reset)
    if (!Number.isNaN(at)) note(Math.max(0, at - now), headers.get(`anthropic-ratelimit-${kind}-remaining`))
  }
  const chosen = exhausted.length > 0 ? exhausted : all
  return chosen.length > 0 ? Math.max(...chosen) : null
}

/**
 * The longest a usage limit is believed to last (31 days, a monthly quota's): a reset
 * further away (ten years, or a number past what a date can hold) is taken as this, so
 * a task pauses (and the key's other tasks wait) a month at most, then asks again.
 */
export const MAX_LIMIT_MS = 31 * 24 * 3_600_000

/** When the limit a response reports lifts, in milliseconds from `now` (at most MAX_LIMIT_MS): Retry-After first, then the providers' reset headers; null when it says none. */
export function limitResetMs(headers: Headers, now: number): number | null {
  const ms = retryAfterMs(headers, now) ?? providerResetMs(headers, now)
  return ms === null ? null : Math.min(ms, MAX_LIMIT_MS)
}

/**
 * Marks a response that is a usage limit beyond `maxWaitMs`: the SDK is told not to retry
 * it (`x-should-retry: false`) and the time it lifts is put in LIMIT_UNTIL_HEADER, for
 * the client's error. Called on the headers as the server sent them, before Retry-After is
 * cut to the longest wait.
 */
export function markUsageLimit(status: number, headers: Headers, maxWaitMs: number, now: number = Date.now()): void {
  if (!LIMIT_STATUSES.has(status)) return
  const ms = limitResetMs(headers, now)
  if (ms === null || ms <= maxWaitMs) return
  headers.set('x-should-retry', 'false')
  headers.set(LIMIT_UNTIL_HEADER, new Date(now + ms).toISOString())
}

/** The time a failed request's usage limit lifts (set by markUsageLimit), from an SDK error's headers; null when it was no usage limit. */
export function limitUntilOf(err: unknown): Date | null {
  const headers = (err as { headers?: unknown } | null)?.headers
  const value = headers instanceof Headers ? headers.get(LIMIT_UNTIL_HEADER) : null
  if (value === null) return null
  const at = Date.parse(value)
  return Number.isNaN(at) ? null : new Date(at)
}
