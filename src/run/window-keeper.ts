import { compressIfNeeded, plausibleTokens, requestMessages } from '../context/request.js'
import type { PruneMemo, RequestPlan } from '../context/request.js'
import type { CompactionResult } from '../context/compaction.js'
import type { CompactionSettings } from '../context/compaction.js'
import type { PrunePolicy } from '../context/prune.js'
import type { Summarizer } from '../context/summarizer.js'
import { freshOutputs } from '../storage/blob/expand.js'
import type { BlobSettings } from '../storage/blob/store.js'
import type { TaskHandle } from '../storage/task/handle.js'
import type { RunLog } from './log.js'
import { statusText } from './remote.js'
import type { RemoteLink } from './remote.js'
import { grouped } from '../text.js'

/** What the keeper needs of the agent's parts (AgentParts has all of it). */
export interface WindowParts {
  handle: TaskHandle
  summarizer: Summarizer
  limits: { compaction: CompactionSettings; compressAt: number; requestBudget: number; prune: PrunePolicy; maxRounds: number; blobs: BlobSettings }
  now: () => Date
  log: RunLog
  remote?: RemoteLink
}

/**
 * The window between turns (docs/contract.md §5): when it is compacted (over the limit on the
 * pruned request, by a plausible usage report or the estimate; too many tool rounds; a
 * `compress` request; a request that would not fit), at most once per turn, and the
 * request built from it, which never leaves history out silently.
 */
export class WindowKeeper {
  /** Provider's prompt_tokens of the last request (when believed), and the estimate of that request. */
  private reported: { prompt: number; estimate: number } | null = null
  /** Said once per run: a provider whose usage reports are not believed. */
  private doubtedUsage = false
  /** At most one compaction per turn (a turn that compacts twice is a loop, not progress). */
  private compacted = false

  constructor(
    private readonly parts: WindowParts,
    /** The agent's turn count, for the status comment. */
    private readonly turns: () => number,
  ) {
    // The task's directory as it is now (a task moves between running/, paused/ and completed/).
    this.fresh = freshOutputs(() => parts.handle.dir, parts.limits.blobs.maxInlineBytes)
  }

  private get limits() {
    return this.parts.limits
  }

  get compactedThisTurn(): boolean {
    return this.compacted
  }

  startTurn(): void {
    this.compacted = false
  }

  /** The provider's last count no longer describes the window (it was cut, or refused). */
  forgetUsage(): void {
    this.reported = null
  }

  compressOptions() {
    const { summarizer, limits, now, log } = this.parts
    // What the next request will carry: the provider's count of the last request plus
    // what the request gained since (estimated), or the estimate alone.
    const estimate = this.plan().prunedTokens
    const tokens = this.reported ? this.reported.prompt + Math.max(0, estimate - this.reported.estimate) : estimate
    return { summarizer, settings: limits.compaction, limit: limits.compressAt, requestTokens: tokens, now, warn: (m: string) => log.warn(m) }
  }

  /** More tool rounds in the window than context.compression.max_rounds (counted from the newest, stopping there). */
  tooManyRounds(): boolean {
    const window = this.parts.handle.window()
    let rounds = 0
    for (let i = window.length - 1; i >= 0; i--) {
      if (window[i]?.role === 'assistant' && (window[i]?.tool_calls?.length ?? 0) > 0 && ++rounds > this.limits.maxRounds) return true
    }
    return false
  }

  /** The last plan, and what it was made from: the window grows only by push and is replaced whole, so these say whether it changed. */
  private planned: { window: readonly unknown[]; length: number; budget: number; plan: RequestPlan } | null = null

  /** What the last plan pruned, for the next (see PruneMemo). */
  private readonly pruneMemo: PruneMemo = {}
  /** Fresh tool results stored as blobs, as the request sends them (whole). */
  private readonly fresh: ReturnType<typeof freshOutputs>

  /** The next request as the window stands now (made once per window and budget: a turn asks twice). */
  plan(budget = this.limits.requestBudget): RequestPlan {
    const window = this.parts.handle.window()
    const last = this.planned
    if (last !== null && last.window === window && last.length === window.length && last.budget === budget) return last.plan
    const plan = requestMessages(window, budget, this.limits.prune, this.pruneMemo, this.fresh)
    this.planned = { window, length: window.length, budget, plan }
    return plan
  }

  async compressOnRequest(requestId: string): Promise<CompactionResult | { why: string }> {
    // A failed summary is warned about through `warn`: kept, so the requester is told which it was.
    let failure: string | null = null
    const options = this.compressOptions()
    const result = await compressIfNeeded(this.parts.handle, { ...options, force: true, requestId, warn: (m: string) => ((failure = m), options.warn(m)) })
    if (result) {
      await this.compressed(result)
      return result
    }
    return {
      why:
        failure ??
        `too few messages since the last summary (at least ${this.limits.compaction.minToCompress} beyond the ${this.limits.compaction.keepRecent} kept are needed)`,
    }
  }

  async compress(force = false): Promise<boolean> {
    if (this.compacted) return false
    const result = await compressIfNeeded(this.parts.handle, { ...this.compressOptions(), force: force || this.tooManyRounds() })
    if (result === null) return false
    this.compacted = true
    await this.compressed(result)
    return true
  }

  async compressed(result: CompactionResult): Promise<void> {
    const before = result.tokensBefore
    const after = result.tokensAfter
    this.reported = null
    // Where the task stands, for the planning history a later task inherits.
    const state = /## Current State\s*\n([\s\S]*?)(?:\n## |$)/.exec(result.record.summary)?.[1]?.trim()
    if (state) this.parts.handle.addPlan('progress', state.slice(0, 2000))
    this.parts.log.info(`compacted the window: ${grouped(before)} → ${grouped(after)} tokens`)
    await this.parts.remote?.status(statusText(this.parts.handle, `working; turn ${this.turns()}, context compacted (${result.record.summary_id} so far)`))
  }

  /**
   * The request as it will be sent. Leaving history out of it is a last resort: the
   * window is compacted first (once per turn), and what still does not fit is named in
   * the request itself.
   */
  async buildRequest(budget: number): Promise<RequestPlan> {
    let plan = this.plan(budget)
    if (plan.dropped > 0 && (await this.compress(true))) plan = this.plan(budget)
    if (plan.dropped > 0)
      this.parts.log.warn(
        `${plan.dropped} message(s) left out of this request: they do not fit the context even after compaction (a note in the request says so)`,
      )
    if (plan.clipped > 0) this.parts.log.warn(`${plan.clipped} message(s) cut in this request to fit the context (the whole is on disk)`)
    return plan
  }

  /** Keeps the provider's count of a request when it is plausible; says once when it is not. */
  noteUsage(prompt: number | null, plan: RequestPlan): void {
    const judged = plausibleTokens(prompt, plan.tokens)
    this.reported = prompt !== null && judged.believed ? { prompt, estimate: plan.prunedTokens } : null
    if (!judged.believed && !this.doubtedUsage) {
      this.doubtedUsage = true
      this.parts.log.warn(
        `the provider reports ${grouped(prompt ?? 0)} prompt tokens for a request estimated at ${grouped(plan.tokens)}; compaction goes by the estimate`,
      )
    }
  }
}
