import { createHash } from 'node:crypto'
import { setTimeout as delay } from 'node:timers/promises'
import type { Config } from '../config/schema.js'
import type { WaitNote } from './waits.js'
import { ProviderError } from '../errors.js'
import type { ChatMessage, ChatOptions, ChatResult, LlmClient, ToolSpec } from '../llm/client.js'
import { CAP_KEYS, capReset, dayKey, passedSharedCap, requestEstimate, usd } from '../operations/budgets.js'
import type { Caps, ModelPrice, SharedSpend } from '../operations/budgets.js'
import { costOf } from '../operations/tokens.js'
import type { IndexStore } from '../storage/index/store.js'
import { estimateTokens, windowTokens } from '../storage/format/tokens.js'
import type { BudgetCap } from '../storage/task/state.js'
import { MAX_TIMER_MS } from './stop.js'

/**
 * The check before every LLM request of a task (turns, compactions, the final summary):
 * docs/running.md#budgets and #rate-limits.
 *
 * - Money: the request's most cost (its prompt tokens at the prompt rate plus its
 *   max_tokens at the completion rate) must not take the task's spend past its cap, nor
 *   the user's spend of the day or month, nor everyone's of the day, past theirs; else
 *   the request is not sent and the task pauses (BudgetPause). The task's spend is a
 *   number in memory (from its recorded tokens at start, plus each reply's cost): no
 *   index read. The shared figures are read from the index before each request only when
 *   a shared cap applies (one read of a primary key: a few microseconds in tasks.db, one
 *   round trip to PostgreSQL, against an LLM request of seconds); that read is what keeps
 *   the overshoot of concurrent tasks to their one request in flight each.
 * - Usage limits: an API key a task (this one or another on the same index) was told is
 *   limited is not used until the limit lifts: the request waits (a stop ends the wait)
 *   or, without waiting, the task pauses (RateLimitPause). The index is asked at start and
 *   then at most every KEY_REFRESH_MS.
 */

/** How often the index is asked whether another task learnt that the key is limited. */
const KEY_REFRESH_MS = 5_000

/** The request would pass a cost cap: not sent. */
export class BudgetPause extends Error {
  constructor(
    readonly cap: BudgetCap,
    readonly resumeAt: Date | null,
    message: string,
  ) {
    super(message)
  }
}

/** The API key is limited until `until`, and this run does not wait. */
export class RateLimitPause extends Error {
  constructor(readonly until: Date) {
    super(`the provider's usage limit on this API key lifts at ${until.toISOString()}`)
  }
}

export interface GuardSetup {
  index: IndexStore | null
  user: string
  model: string
  /** pricing.<model>, or null: not capped by money. */
  price: ModelPrice | null
  pricing: Config['pricing']
  caps: Caps
  /** What the task cost before this run (its recorded tokens). */
  taskSpent: number
  timezone: string
  now: () => Date
  /** The API key's hash and provider, or null (no key to share a limit on). */
  key: { hash: string; provider: string } | null
  /** Wait out a usage limit (else pause at once). */
  wait: boolean
  /** llm.max_output_tokens: a request's max_tokens when it names none, and the most any has. */
  maxOutputTokens: number
  log: { info(message: string): void; warn(message: string): void }
  /** Says and records a wait (docs/running.md#waits). */
  noteWait: (note: WaitNote) => void
}

/** The hash an API key's limit is recorded under: SHA-256 of the base URL and the key (never the key). */
export function keyHash(baseUrl: string, apiKey: string | null): string {
  return createHash('sha256')
    .update(`${baseUrl}\n${apiKey ?? ''}`)
    .digest('hex')
}

export class SpendGuard {
  private taskSpent: number
  /** The shared figures as last read (plus this task's spend since), with the day they are of. */
  private shared: (SharedSpend & { day: string }) | null = null
  private readonly sharedCaps: boolean
  private keyUntil = 0
  private keyCheckedAt = -Infinity
  private tools: { length: number; tokens: number } = { length: -1, tokens: 0 }
  private indexWarned = false

  constructor(private readonly setup: GuardSetup) {
    this.taskSpent = setup.taskSpent
    const { userDaily, userMonthly, fleetDaily } = setup.caps
    this.sharedCaps = setup.price !== null && (userDaily !== null || userMonthly !== null || fleetDaily !== null)
  }

  /** The task's spend so far (USD). */
  get spent(): number {
    return this.taskSpent
  }

  /** The client with this check before each request. */
  wrap(client: LlmClient): LlmClient {
    return {
      get model() {
        return client.model
      },
      get server() {
        return client.server
      },
      get contextLength() {
        return client.contextLength
      },
      chat: (messages, options = {}) => this.chat(client, messages, options),
    }
  }

  private async chat(client: LlmClient, messages: ChatMessage[], options: ChatOptions): Promise<ChatResult> {
    const price = this.setup.price
    for (;;) {
      // Most requests: the key not known to be limited and looked up lately, so nothing to wait for.
      if (this.keyUntil > 0 || Date.now() - this.keyCheckedAt >= KEY_REFRESH_MS) await this.keyFree(options.signal)
      // Without a price nothing is counted: the request goes as it is.
      const prompt = price === null ? 0 : (options.promptTokens ?? windowTokens(messages) + this.toolTokens(options.tools))
      if (price !== null)
        await this.checkBudget(requestEstimate(price, prompt, Math.min(options.maxTokens ?? this.setup.maxOutputTokens, this.setup.maxOutputTokens)))
      let result: ChatResult
      try {
        result = await client.chat(messages, options)
      } catch (err) {
        if (!(err instanceof ProviderError) || err.limitedUntil === null) throw err
        this.noteLimit(err.limitedUntil)
        continue
      }
      this.account(result, prompt)
      return result
    }
  }

  /** Tokens of the tool definitions, estimated again only when their number changes (MCP tools join before the first request). */
  private toolTokens(tools: readonly ToolSpec[] | undefined): number {
    const length = tools?.length ?? 0
    if (length !== this.tools.length) this.tools = { length, tokens: length === 0 ? 0 : estimateTokens(JSON.stringify(tools)) }
    return this.tools.tokens
  }

  /** O(1) on numbers in memory for the task's cap; the index is read only when a shared cap applies. */
  private async checkBudget(estimate: number): Promise<void> {
    const { caps, timezone, now } = this.setup
    if (caps.task !== null && this.taskSpent + estimate > caps.task) {
      throw new BudgetPause(
        'task',
        null,
        `the task's cost cap (${CAP_KEYS.task}: ${usd(caps.task)}) would be passed: ${usd(this.taskSpent)} spent, the next request may cost ${usd(estimate)}`,
      )
    }
    if (!this.sharedCaps) return
    const at = now()
    const shared = await this.sharedSpend(at)
    const passed = passedSharedCap(caps, shared, estimate)
    if (passed === null) return
    const reset = capReset(passed.cap, at, timezone)
    const whose = passed.cap === 'fleet-daily' ? "everyone's spend today" : `${this.setup.user}'s spend ${passed.cap === 'user-daily' ? 'today' : 'this month'}`
    throw new BudgetPause(
      passed.cap,
      reset,
      `the ${passed.cap} cost cap (${CAP_KEYS[passed.cap]}: ${usd(passed.limit)}) would be passed: ${whose} is ${usd(passed.spent)}, the next request may cost ${usd(estimate)}; it resets at ${reset?.toISOString()}`,
    )
  }

  /** The shared figures, read again from the index (which holds this task's spend too). */
  private async sharedSpend(at: Date): Promise<SharedSpend> {
    const day = dayKey(at, this.setup.timezone)
    const index = this.setup.index
    if (index !== null) {
      try {
        this.shared = { ...(await index.spendTotals(this.setup.user, day)), day }
        return this.shared
      } catch (err) {
        if (!this.indexWarned)
          this.setup.log.warn(
            `the index cannot tell the spend of other tasks (${(err as Error).message}); the shared cost caps count this task's spend alone until it can`,
          )
        this.indexWarned = true
      }
    }
    if (this.shared === null || this.shared.day !== day)
      this.shared = { user_day: 0, user_month: this.shared?.day.slice(0, 7) === day.slice(0, 7) ? this.shared.user_month : 0, fleet_day: 0, day }
    return this.shared
  }

  /** A reply's cost, added to the task's spend and to the user's in the index. */
  private account(result: ChatResult, promptEstimate: number): void {
    const { price, pricing, model, index, user, timezone, now } = this.setup
    if (price === null) return
    const usage = result.usage
    const split = usage
      ? {
          prompt: usage.prompt_tokens,
          completion: usage.completion_tokens,
          cached: usage.cached_tokens ?? 0,
          ...(usage.cache_write_tokens ? { cache_write: usage.cache_write_tokens } : {}),
        }
      : {
          prompt: promptEstimate,
          completion: estimateTokens(result.message.content ?? '') + estimateTokens(JSON.stringify(result.message.tool_calls ?? [])),
          cached: 0,
        }
    const cost = costOf(model, split, pricing) ?? 0
    this.taskSpent += cost
    if (this.shared !== null) {
      this.shared.user_day += cost
      this.shared.user_month += cost
      this.shared.fleet_day += cost
    }
    try {
      index?.addSpend(user, dayKey(now(), timezone), cost)
    } catch (err) {
      if (!this.indexWarned)
        this.setup.log.warn(`the spend of this task could not be added to the index (${(err as Error).message}); stats and the shared caps miss it`)
      this.indexWarned = true
    }
  }

  /** Learnt from a reply: the key is limited until `until`; recorded for every task on the same index. */
  private noteLimit(until: Date): void {
    this.keyUntil = Math.max(this.keyUntil, until.getTime())
    this.keyCheckedAt = Date.now()
    const key = this.setup.key
    if (key === null) return
    try {
      this.setup.index?.setKeyLimit(key.hash, key.provider, until.toISOString())
    } catch {
      // The index missed it: other tasks learn it from their own 429.
    }
  }

  /** Resolves once the key is not known to be limited: waiting (a stop ends it), or throwing RateLimitPause when this run does not wait. */
  private async keyFree(signal: AbortSignal | undefined): Promise<void> {
    await this.refreshKeyLimit()
    // The provider's time, not the budgets' clock: a limit lifts by the wall clock.
    const left = this.keyUntil - Date.now()
    if (left <= 0) return
    const until = new Date(this.keyUntil)
    if (!this.setup.wait) throw new RateLimitPause(until)
    this.setup.noteWait({
      ms: left,
      reason: 'usage limit',
      line: `waiting until ${until.toISOString()}: the provider's usage limit on this API key lifts then (a stop ends the wait; --no-wait pauses instead)`,
    })
    await delay(Math.min(left, MAX_TIMER_MS), undefined, signal ? { signal } : {})
    // Waited: the next request finds out whether the limit lifted.
    this.keyUntil = 0
    this.keyCheckedAt = Date.now()
  }

  private async refreshKeyLimit(): Promise<void> {
    const { key, index } = this.setup
    if (key === null || index === null || Date.now() - this.keyCheckedAt < KEY_REFRESH_MS) return
    this.keyCheckedAt = Date.now()
    try {
      const until = await index.keyLimit(key.hash)
      const at = until === null ? Number.NaN : Date.parse(until)
      if (!Number.isNaN(at)) this.keyUntil = Math.max(this.keyUntil, at)
    } catch {
      // Unknown now: the request goes, and a 429 says it again.
    }
  }
}
