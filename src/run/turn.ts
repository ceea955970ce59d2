import { NOOP_TURN } from '../telemetry/trace.js'
import type { TaskTrace, TurnTrace } from '../telemetry/trace.js'
import type { PrunePolicy } from '../context/prune.js'
import type { CompactionSettings } from '../context/compaction.js'
import type { Summarizer } from '../context/summarizer.js'
import { ProviderError } from '../errors.js'
import type { ChatResult, LlmClient } from '../llm/client.js'
import { LockLostError } from '../storage/lock/lock.js'
import type { ToolCall, TurnUsage } from '../storage/format/records.js'
import { SKIPPED_AFTER_END } from './repair.js'
import type { TaskHandle } from '../storage/task/handle.js'
import { estimateTokens } from '../storage/format/tokens.js'
import { commandExit, mainArgument } from '../tools/main-argument.js'
import type { ToolRegistry } from '../tools/registry.js'
import { readBlob, recordToolOutput } from '../storage/blob/store.js'
import { networkFields } from '../tools/sandbox/egress-proxy.js'
import type { BlobSettings } from '../storage/blob/store.js'
import type { SandboxPlan } from '../tools/sandbox.js'
import type { ReadStamp, ToolContext } from '../tools/types.js'
import { LoopGuard } from './guards.js'
import type { RunLog } from './log.js'
import type { StopController } from './stop.js'
import { endingFor } from './ending.js'
import type { Ending } from './ending.js'
import { collectIfGrown, tuneV8ForTheLoop } from './v8-tuning.js'
import { InboxRequests } from './requests.js'
import { NestedInstructions } from './nested-instructions.js'
import { WindowKeeper } from './window-keeper.js'
import type { RemoteLink } from './remote.js'
import { grouped } from '../text.js'
import { BudgetPause, RateLimitPause } from './spend-guard.js'

export interface AgentLimits {
  maxTurns: number
  maxTokens: number | null
  /** The --timeout budget (time worked on the task, across resumes), or null. */
  timeoutMs: number | null
  /** Token limit above which the window is compressed. */
  compressAt: number
  /** Token budget of one request (the window is cut to it when compression could not help). */
  requestBudget: number
  /** What each request keeps of old tool output (the rest is `[pruned]` in the request only). */
  prune: PrunePolicy
  compaction: CompactionSettings
  commandTimeoutSeconds: number
  /** Tool calls run per assistant message (tools.max_calls_per_reply); the rest are answered as skipped. */
  maxCallsPerReply: number
  /** Compact when the window holds more tool rounds than this (context.compression.max_rounds). */
  maxRounds: number
  /** Tool outputs stored once in blobs/ (context.blobs). */
  blobs: BlobSettings
}

export interface AgentParts {
  handle: TaskHandle
  client: LlmClient
  summarizer: Summarizer
  tools: ToolRegistry
  limits: AgentLimits
  workspace: string
  /** Real paths no tool may reach (the task tree, the config file). */
  hidden: readonly string[]
  /** How run_command runs (bubblewrap, or none when the operator said so). */
  sandbox: SandboxPlan
  log: RunLog
  stop: StopController
  now: () => Date
  /** The recorded result of a call, when replaying a recording (to log differences). */
  expected?: (callId: string) => string | undefined
  /** Called after each turn is saved (the demo pauses half-way through it). */
  onTurn?: (turns: number) => void
  /** The task's issue or MR, for new comments and milestones (GitHub and GitLab tasks). */
  remote?: RemoteLink
  /** Spans of turns, LLM calls and tool calls (no-ops unless telemetry is configured). */
  trace?: TaskTrace
  /** Bytes of inbox.jsonl when this run took the task (0 for a new one): a pause request after them is for this run. */
  inboxAtStart?: number
}

const ABORTED = '[aborted]'
const MAX_READ_STAMPS = 500

/**
 * The agent loop of docs/contract.md §12.2. One turn: the inbox (comments, control requests),
 * the compression check, the request (window → prune → LLM), the assistant message
 * recorded before any tool runs, each tool call executed and answered exactly once,
 * then counters, heartbeat and tasks.db. Memory stays bounded: the window (bounded by
 * compaction) and a few counters, whatever the task's length.
 */
export class Agent {
  private readonly guard = new LoopGuard()
  private readonly reads: Map<string, ReadStamp>
  private turns: number
  /** Turns before the current chat message: a chat session's max_turns budget is per message. */
  private turnBase = 0
  private tokens: number
  /** total_tokens_used split: prompt (of which read from and written to the cache) and completion, across resumes. */
  private readonly split: { prompt: number; completion: number; cached: number; cacheWrite: number }
  /** The last request's tokens, recorded with the assistant message it produced. */
  private lastUsage: TurnUsage | null = null
  /** Said once per run: a provider whose usage figures are not believed. */
  private doubtedUsage = false
  private elapsedBefore: number
  private readonly startedAt = Date.now()
  /** Provider's prompt_tokens of the last request, and the window's estimate at that moment. */
  /** The window between turns: when it is compacted, and the request built from it. */
  private readonly window: WindowKeeper
  private lastTool: string | null = null
  /** Milliseconds of the current turn spent waiting on the LLM and in tools. */
  private readonly timings = { llm: 0, tools: 0 }
  private rss = { at: -Infinity, mb: 0 }
  /** The inbox: comments, chat messages and control requests (shared with the chat loop). */
  readonly requests: InboxRequests
  private turnTrace: TurnTrace = NOOP_TURN
  /** The AGENTS.md of the directories the tools work in, given once each (docs/environments.md#nested-agentsmd). */
  private readonly nested: NestedInstructions

  constructor(private readonly parts: AgentParts) {
    tuneV8ForTheLoop()
    this.nested = new NestedInstructions(parts.handle, parts.workspace, parts.log)
    const state = parts.handle.state
    this.turns = state.turns ?? 0
    this.tokens = state.total_tokens_used
    this.split = {
      prompt: state.prompt_tokens ?? 0,
      completion: state.completion_tokens ?? 0,
      cached: state.cached_tokens ?? 0,
      cacheWrite: state.cache_write_tokens ?? 0,
    }
    this.window = new WindowKeeper(parts, () => this.turns)
    this.requests = new InboxRequests(
      {
        handle: parts.handle,
        log: parts.log,
        now: parts.now,
        ...(parts.remote ? { remote: parts.remote } : {}),
        compress: (requestId) => this.window.compressOnRequest(requestId),
      },
      state.inbox_offset ?? 0,
      parts.inboxAtStart,
    )
    this.elapsedBefore = state.elapsed_ms ?? 0
    this.reads = new Map(Object.entries(state.read_files ?? {}))
  }

  /** Runs turns until the task ends one way or another. Throws only what is not an ending. */
  run(): Promise<Ending> {
    return this.guarded(async () => {
      for (;;) {
        const early = this.early() ?? (await this.requests.read())
        if (early) return early
        const ending = await this.step()
        if (ending) return ending
      }
    })
  }

  /** Runs `body`, turning the loss of the lock (however it shows) into the `lost` ending. */
  async guarded(body: () => Promise<Ending>): Promise<Ending> {
    try {
      return await body()
    } catch (err) {
      const lost = this.parts.handle.lost
      if (lost || err instanceof LockLostError) return { kind: 'lost', error: lost ?? (err as LockLostError) }
      if (this.parts.stop.reason === 'lost') return { kind: 'lost', error: new LockLostError(this.parts.handle.dir, null) }
      throw err
    }
  }

  /** A budget spent, or a stop requested: the ending it means, else null. */
  early(): Ending | null {
    return this.budgetEnding() ?? this.stopEnding()
  }

  /**
   * One turn after the inbox: compression check, request, the assistant message and
   * its tool calls, counters saved. Returns the ending when the turn ended the task (an
   * answer without tool calls, `finish`, a loop breaker, a stop), else null.
   */
  async step(): Promise<Ending | null> {
    this.turnTrace = this.parts.trace?.turn(this.turns + 1) ?? NOOP_TURN
    try {
      const started = performance.now()
      this.window.startTurn()
      await this.window.compress()
      const asked = performance.now()
      this.parts.log.waiting?.(`the LLM (${this.parts.client.model})`)
      const reply = await this.ask()
      this.parts.log.waiting?.(null)
      this.timings.llm = performance.now() - asked
      if ('kind' in reply) return reply
      const ending = await this.turn(reply)
      await this.save(ending === null)
      this.logTimings(performance.now() - started)
      if (!ending) this.parts.onTurn?.(this.turns)
      return ending
    } finally {
      this.turnTrace.end()
    }
  }

  /** The counters to write to state.json (every turn, and before the task settles). */
  progress() {
    const reads = [...this.reads].slice(-MAX_READ_STAMPS)
    return {
      turns: this.turns,
      llm_call_count: this.turns,
      total_tokens_used: this.tokens,
      prompt_tokens: this.split.prompt,
      completion_tokens: this.split.completion,
      ...(this.split.cached > 0 ? { cached_tokens: this.split.cached } : {}),
      ...(this.split.cacheWrite > 0 ? { cache_write_tokens: this.split.cacheWrite } : {}),
      inbox_offset: this.requests.position,
      elapsed_ms: this.elapsedBefore + (Date.now() - this.startedAt),
      read_files: Object.fromEntries(reads),
      current_context_tokens: this.parts.handle.windowTokens(),
      ...(this.parts.remote ? { comment_detection: this.parts.remote.detection() } : {}),
    }
  }

  /** The turn's counters; written while the next request goes out when there is one (`more`), else at once. */
  private async save(more: boolean): Promise<void> {
    this.parts.handle.markProgress()
    const change = { ...this.progress(), last_activity: this.lastTool ? `tool ${this.lastTool}` : 'answered' }
    await (more ? this.parts.handle.saveProgress(change) : this.parts.handle.update(change))
    this.parts.log.status({ turn: this.turns, tokens: this.tokens, window: this.parts.handle.windowTokens(), lastTool: this.lastTool })
  }

  private logTimings(total: number): void {
    const { llm, tools } = this.timings
    const round = (ms: number) => Math.round(ms * 1000) / 1000
    this.parts.log.turn({ turn: this.turns, llm_ms: round(llm), tools_ms: round(tools), overhead_ms: round(total - llm - tools), rss_mb: this.rssMb() })
    this.timings.tools = 0
  }

  /** Resident memory in MB, read at most once a second: the kernel's figure costs a file read of /proc. */
  private rssMb(): number {
    const now = performance.now()
    if (now - this.rss.at >= 1000) this.rss = { at: now, mb: Math.round(process.memoryUsage.rss() / 1e5) / 10 }
    return this.rss.mb
  }

  /** Chat: the max_turns budget counts from here (each message has its own). */
  resetTurnBudget(): void {
    this.turnBase = this.turns
  }

  /** The max_turns budget is used up (for a chat session: the current message's). */
  turnBudgetSpent(): boolean {
    return this.turns - this.turnBase >= this.parts.limits.maxTurns
  }

  private budgetEnding(): Ending | null {
    const { limits } = this.parts
    if (this.turnBudgetSpent()) return { kind: 'timeout', reason: `max_turns budget: ${limits.maxTurns} turns used` }
    if (limits.maxTokens !== null && this.tokens >= limits.maxTokens) {
      return { kind: 'timeout', reason: `max_tokens budget: ${grouped(this.tokens)} of ${grouped(limits.maxTokens)} tokens used` }
    }
    return null
  }

  private stopEnding(): Ending | null {
    const reason = this.parts.stop.reason
    if (reason === null) return null
    return endingFor(reason, this.parts.limits.timeoutMs, this.parts.handle.dir)
  }

  /** One LLM request; a context-length error forces a compaction (or a tighter request) and one retry. */
  private async ask(retried = false): Promise<ChatResult | Ending> {
    const { client, tools, limits, stop } = this.parts
    const plan = await this.window.buildRequest(retried && this.window.compactedThisTurn ? Math.floor(limits.requestBudget * 0.6) : limits.requestBudget)
    // A stop that came while the window was built (a compaction it cut short): no request goes out after it.
    const stopped = this.stopEnding()
    if (stopped) return stopped
    const messages = plan.messages
    // A signal per request: the SDK adds a listener to the signal it is given, and on
    // the task's long-lived stop signal those would pile up, one per turn.
    const request = new AbortController()
    const abort = () => request.abort(stop.signal.reason)
    stop.signal.addEventListener('abort', abort, { once: true })
    const span = this.turnTrace.llm({ model: client.model, messages })
    try {
      const pending = client.chat(messages, { tools: tools.specs(), signal: request.signal, promptTokens: plan.tokens })
      // Once the request has gone out (the client's own steps run first): the heap's dead messages are collected while the LLM works.
      setImmediate(collectIfGrown)
      const reply = await pending
      span.end({
        inputTokens: reply.usage?.prompt_tokens ?? null,
        outputTokens: reply.usage?.completion_tokens ?? null,
        cachedTokens: reply.usage?.cached_tokens ?? null,
        finishReason: reply.message.tool_calls?.length ? 'tool_calls' : 'stop',
        output: reply.message,
      })
      this.turns++
      const usage = reply.usage
      if (reply.usageRefused !== undefined) this.refusedUsage(reply.usageRefused, usage === null)
      this.lastUsage = usage
        ? {
            prompt_tokens: usage.prompt_tokens,
            completion_tokens: usage.completion_tokens,
            ...(usage.cached_tokens ? { cached_tokens: usage.cached_tokens } : {}),
            ...(usage.cache_write_tokens ? { cache_write_tokens: usage.cache_write_tokens } : {}),
          }
        : {
            prompt_tokens: plan.tokens,
            completion_tokens: estimateTokens(reply.message.content ?? '') + estimateTokens(JSON.stringify(reply.message.tool_calls ?? [])),
            estimated: true,
          }
      this.split.prompt += this.lastUsage.prompt_tokens
      this.split.completion += this.lastUsage.completion_tokens
      this.split.cached += this.lastUsage.cached_tokens ?? 0
      this.split.cacheWrite += this.lastUsage.cache_write_tokens ?? 0
      this.tokens += usage?.total_tokens ?? this.lastUsage.prompt_tokens + this.lastUsage.completion_tokens
      this.window.noteUsage(usage?.prompt_tokens ?? null, plan)
      return reply
    } catch (err) {
      span.fail(err)
      const stopped = this.stopEnding()
      if (stopped) return stopped
      if (err instanceof BudgetPause) return { kind: 'paused', cause: 'budget', error: err.message, resumeAt: err.resumeAt, budgetCap: err.cap }
      if (err instanceof RateLimitPause) return { kind: 'paused', cause: 'rate-limit', error: err.message, resumeAt: err.until }
      if (!(err instanceof ProviderError)) throw err
      if (!retried && isContextExceeded(err)) {
        this.window.forgetUsage()
        const compacted = await this.window.compress(true)
        this.parts.log.warn(
          `the provider says the request is too long; ${compacted ? 'compacting' : 'sending a smaller request'} and retrying once (${err.message})`,
        )
        return this.ask(true)
      }
      return { kind: 'paused', cause: 'llm', error: err.message + (err.hint ? ` (${err.hint})` : ''), failure: err.failure }
    } finally {
      stop.signal.removeEventListener('abort', abort)
    }
  }

  /** Says, once per run, that the provider's usage figures were not believed (docs/security.md#usage-figures-from-the-server). */
  private refusedUsage(what: string, estimated: boolean): void {
    if (this.doubtedUsage) return
    this.doubtedUsage = true
    this.parts.log.warn(
      `the provider's usage report is not believed (${what.slice(0, 200)}); ${estimated ? 'this request is counted by the estimate' : 'that figure is left out'}, and so are later ones like it`,
    )
  }

  /** Records the assistant message, then runs its tool calls in order. */
  private async turn(reply: ChatResult): Promise<Ending | null> {
    const { handle } = this.parts
    const content = reply.message.content ?? ''
    const calls = reply.message.tool_calls ?? []
    // Recorded before any tool runs: a crash mid-turn leaves the calls, which a resume answers.
    handle.addMessage({ role: 'assistant', content, ...(calls.length > 0 ? { tool_calls: calls } : {}), ...(this.lastUsage ? { usage: this.lastUsage } : {}) })
    this.lastTool = null
    if (calls.length === 0) return { kind: 'completed', answer: content, finishStatus: null }
    return this.runCalls(calls)
  }

  private async runCalls(calls: readonly ToolCall[]): Promise<Ending | null> {
    const { tools, stop, log } = this.parts
    let ending: Ending | null = null
    const cap = this.parts.limits.maxCallsPerReply
    if (calls.length > cap)
      log.warn(`the reply carries ${calls.length} tool calls; running the first ${cap} (tools.max_calls_per_reply), answering the rest as skipped`)
    for (const [i, call] of calls.entries()) {
      if (i >= cap && ending === null && stop.reason === null) {
        this.answer(
          call,
          call.function.name,
          `[skipped: at most ${cap} tool calls run per reply; send this call again in a later reply]`,
          'error',
          'skipped',
          0,
          {},
        )
        continue
      }
      if (ending !== null || stop.reason !== null) {
        // Every call gets exactly one result, also those that will never run.
        this.answer(call, call.function.name, ending ? SKIPPED_AFTER_END : ABORTED, 'error', ending ? 'skipped' : 'aborted', 0, {})
        continue
      }
      const started = performance.now()
      const about = mainArgument(call.function.name, parseArgs(call.function.arguments))
      log.waiting?.(`${call.function.name}${about ? ` ${about}` : ''}`)
      const span = this.turnTrace.tool(call.function.name, call.id, call.function.arguments, this.parts.handle.toolLabel(call.function.name))
      const outcome = await tools.call(call, this.toolContext())
      span.end(outcome.status, outcome.error, outcome.output)
      log.waiting?.(null)
      const elapsed = performance.now() - started
      this.timings.tools += elapsed
      const duration = Math.round(elapsed)
      const arg = mainArgument(outcome.name, outcome.args)
      this.lastTool = arg ? `${outcome.name} ${arg}` : outcome.name
      const result = outcome.aborted ? `${ABORTED} ${outcome.output}`.trimEnd() : outcome.output
      const verdict = this.guard.observe(outcome.name, outcome.args, outcome.output, outcome.malformed)
      const note = verdict.kind === 'warn' ? `\n\n${verdict.note}` : ''
      const recorded = this.answer(call, outcome.name, result, outcome.status, outcome.error, duration, outcome.args, note)
      this.nested.see(outcome.name, outcome.args, outcome.status)
      // The recording holds the output as recorded (masked, a long one as its blob reference).
      this.compareWithRecording(call, recorded)
      // What it was about and how it ended: `run_command \`npm test\` exited 1`, not "success".
      const exit = outcome.name === 'run_command' && outcome.status === 'success' ? commandExit(outcome.output) : null
      const shownArg = arg === null ? '' : outcome.name === 'run_command' ? ` \`${arg}\`` : ` ${arg}`
      log.info(`${outcome.name}${shownArg} ${exit ?? outcome.status}${outcome.error ? `: ${outcome.error}` : ''} (${duration} ms)`, {
        tool: outcome.name,
        ...(arg === null ? {} : { arg }),
        status: outcome.status,
        ...(exit === null ? {} : { exit }),
        duration_ms: duration,
      })
      if (verdict.kind === 'stuck' || verdict.kind === 'malformed') ending = { kind: 'failed', reason: verdict.reason }
      else if (outcome.finish) ending = { kind: 'completed', answer: outcome.finish.summary, finishStatus: outcome.finish.status }
    }
    // After the reply's last result: a message never goes between a call and its result.
    if (ending === null && stop.reason === null) await this.nested.give()
    return ending ?? this.stopEnding()
  }

  private answer(
    call: ToolCall,
    name: string,
    result: string,
    status: 'success' | 'error',
    error: string | null,
    duration: number,
    args: Record<string, unknown>,
    note = '',
  ): string {
    const { handle } = this.parts
    // Masked, and a long output stored once in blobs/ before the message that refers to it (the note after it).
    const recorded = recordToolOutput(handle.dir, result, this.parts.limits.blobs, note)
    handle.addMessage({ role: 'tool', content: recorded, tool_name: name, tool_call_id: call.id })
    handle.addTool({ tool_name: name, arguments: args, result: recorded, status, error, duration_ms: duration })
    return recorded
  }

  private compareWithRecording(call: ToolCall, live: string): void {
    const recorded = this.parts.expected?.(call.id)
    if (recorded === undefined || recorded === live) return
    this.parts.log.warn(`replay: the result of ${call.function.name} (${call.id}) differs from the recording; going on`)
  }

  private toolContext(): ToolContext {
    const reads = this.reads
    return {
      workspace: this.parts.workspace,
      hidden: this.parts.hidden,
      sandbox: this.parts.sandbox,
      signal: this.parts.stop.signal,
      commandTimeoutSeconds: this.parts.limits.commandTimeoutSeconds,
      blobs: { read: (id) => readBlob(this.parts.handle.dir, id) },
      network: (record) => void this.parts.handle.addNetwork(networkFields(record)),
      commands: {
        started: (pgid) => void this.parts.handle.commandRunning(pgid, true),
        ended: (pgid) => void this.parts.handle.commandRunning(pgid, false),
      },
      reads: {
        get: (path) => reads.get(path),
        set: (path, stamp) => {
          // Re-inserted at the end: the newest reads are kept when the map is capped.
          reads.delete(path)
          reads.set(path, stamp)
          if (reads.size > MAX_READ_STAMPS) reads.delete(reads.keys().next().value as string)
        },
      },
    }
  }
}

/** The provider's "prompt too long" answer, in the wordings of OpenAI, vLLM, llama.cpp and Ollama. */
export function isContextExceeded(err: ProviderError): boolean {
  return /context[_ ]length|maximum context|context window|too many tokens|prompt is too long|exceeds the (model'?s )?context|n_ctx/i.test(err.message)
}

/** A call's arguments as the model sent them, for naming the call before it runs (malformed: none). */
function parseArgs(text: string): unknown {
  try {
    return JSON.parse(text)
  } catch {
    return null
  }
}
