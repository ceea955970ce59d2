import { describe, expect, it } from 'vitest'
import { ProviderError } from '../../src/errors.js'
import type { ChatMessage, ChatOptions, ChatResult, LlmClient } from '../../src/llm/client.js'
import { BudgetPause, keyHash, RateLimitPause, SpendGuard } from '../../src/run/spend-guard.js'
import type { GuardSetup } from '../../src/run/spend-guard.js'
import { SqliteStore } from '../../src/storage/index/store.js'

const PRICING = { m: { prompt: 1000, completion: 1000 } }

/** A client that answers at once with `usage` and counts what it was asked; `fail` throws instead. */
function fakeClient(fail?: () => Error) {
  const asked: { messages: ChatMessage[]; options: ChatOptions }[] = []
  const client: LlmClient = {
    model: 'm',
    server: 'http://127.0.0.1:9/v1',
    contextLength: 100_000,
    async chat(messages, options = {}): Promise<ChatResult> {
      asked.push({ messages, options })
      const err = fail?.()
      if (err) throw err
      return { message: { role: 'assistant', content: 'ok' }, usage: { prompt_tokens: 10, completion_tokens: 10, total_tokens: 20 } }
    },
  }
  return { client, asked }
}

function guard(over: Partial<GuardSetup> = {}): { guard: SpendGuard; index: SqliteStore } {
  const index = SqliteStore.open(':memory:')
  const setup: GuardSetup = {
    index,
    user: 'alice',
    model: 'm',
    price: PRICING.m,
    pricing: PRICING,
    caps: { task: null, userDaily: null, userMonthly: null, fleetDaily: null },
    taskSpent: 0,
    timezone: 'UTC',
    now: () => new Date('2026-11-28T10:00:00Z'),
    key: { hash: keyHash('http://x/v1', 'k'), provider: 'openai' },
    wait: false,
    maxOutputTokens: 100,
    log: { info: () => undefined, warn: () => undefined },
    noteWait: () => undefined,
    ...over,
  }
  return { guard: new SpendGuard(setup), index }
}

describe('the check before every request', () => {
  it('a summary request (no estimate given) is estimated from its messages and not sent past the task cap; each reply is counted in memory and in the index', async () => {
    // A token costs $0.001: a reply of 20 tokens $0.02; a request of ~25 prompt tokens and max_tokens 50 may cost $0.075: the second passes $0.09.
    const { guard: g, index } = guard({ caps: { task: 0.09, userDaily: null, userMonthly: null, fleetDaily: null } })
    const { client, asked } = fakeClient()
    const wrapped = g.wrap(client)
    const summary: ChatMessage[] = [{ role: 'user', content: 'x'.repeat(100) }]
    await wrapped.chat(summary, { maxTokens: 50 })
    expect(g.spent).toBeCloseTo(0.02, 9)
    await expect(wrapped.chat(summary, { maxTokens: 50 })).rejects.toBeInstanceOf(BudgetPause)
    expect(asked).toHaveLength(1)
    expect((await index.spendTotals('alice', '2026-11-28')).user_day).toBeCloseTo(0.02, 9)
    // A turn's own estimate is taken as given.
    await expect(wrapped.chat(summary, { maxTokens: 1, promptTokens: 1 })).resolves.toBeTruthy()
    await index.close()
  })

  it('without a price nothing is counted or capped', async () => {
    const { guard: g, index } = guard({ price: null, caps: { task: 0.0001, userDaily: 0.0001, userMonthly: null, fleetDaily: null } })
    const { client, asked } = fakeClient()
    await g.wrap(client).chat([{ role: 'user', content: 'hi' }])
    expect(asked).toHaveLength(1)
    expect(await index.spendByDay('2026-11-01', '2026-11-30')).toEqual([])
    await index.close()
  })

  it('a usage limit is recorded for the key; without waiting the task pauses, and the next request on the key is not sent', async () => {
    const until = new Date(Date.now() + 3_600_000)
    const { guard: g, index } = guard()
    const { client, asked } = fakeClient(() => new ProviderError('limited', undefined, undefined, 'rate_limited', until))
    const err = await g
      .wrap(client)
      .chat([{ role: 'user', content: 'hi' }])
      .catch((e: unknown) => e)
    expect(err).toBeInstanceOf(RateLimitPause)
    expect((err as RateLimitPause).until.toISOString()).toBe(until.toISOString())
    expect(await index.keyLimit(keyHash('http://x/v1', 'k'))).toBe(until.toISOString())
    // Another task on the same index and key learns it before it sends.
    const other = new SpendGuard({ ...(g as unknown as { setup: GuardSetup }).setup })
    const second = fakeClient()
    await expect(other.wrap(second.client).chat([{ role: 'user', content: 'hi' }])).rejects.toBeInstanceOf(RateLimitPause)
    expect(asked).toHaveLength(1)
    expect(second.asked).toHaveLength(0)
    await index.close()
  })

  it('waiting for a usage limit ends at once when the request is stopped', async () => {
    const until = new Date(Date.now() + 3_600_000)
    const { guard: g, index } = guard({ wait: true })
    const { client } = fakeClient(() => new ProviderError('limited', undefined, undefined, 'rate_limited', until))
    const stop = new AbortController()
    const pending = g.wrap(client).chat([{ role: 'user', content: 'hi' }], { signal: stop.signal })
    setImmediate(() => stop.abort(new Error('stopped: SIGTERM')))
    await expect(pending).rejects.toThrow(/stopped: SIGTERM|aborted/)
    await index.close()
  })
})
