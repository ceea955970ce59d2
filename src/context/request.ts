import { leadingBlobId } from '../storage/blob/store.js'
import type { TaskHandle } from '../storage/task/handle.js'
import type { WindowMessage } from '../storage/format/records.js'
import { estimateMessageTokens, windowTokens } from '../storage/format/tokens.js'
import { compact, planCompaction, shouldCompress } from './compaction.js'
import type { CompactionPlan, CompactionResult, CompactionSettings, CompactionSink } from './compaction.js'
import { loadSnapshot } from './snapshot.js'
import { pruneBoundary, prunedMessage } from './prune.js'
import type { PrunePolicy } from './prune.js'
import { addUsage } from './summarizer.js'
import type { Summarizer } from './summarizer.js'
import { grouped } from '../text.js'

/** One LLM request as built from the window, and what building it had to leave out. */
export interface RequestPlan {
  messages: WindowMessage[]
  /** Estimated tokens of `messages`. */
  tokens: number
  /** Estimated tokens of the pruned window before anything was cut to the budget. */
  prunedTokens: number
  /** Messages of the window left out because they did not fit (0 normally). */
  dropped: number
  /** Messages cut down to fit (a huge tool result, task statement or comment), in this request only. */
  clipped: number
}

/** A message after the head larger than this share of the budget is cut in the request (the whole stays on disk). */
const MAX_RESULT_SHARE = 0.5
/** A head message (system prompt, task statement, summary) larger than this share of the limit is cut too. */
const MAX_HEAD_SHARE = 0.25

/**
 * The messages of one LLM request (docs/contract.md §5): the window pruned (tool output of old
 * turns and old tool rounds, ./prune.js), then the window's head (system prompt,
 * original task, summary: everything before the first assistant or tool message)
 * always, and the newest messages that fit in `limit` tokens, never starting on a
 * tool result whose call was left out. A copy: the window and the files never change.
 * What had to be left out is counted, and said in the request itself, so that the
 * caller can compact first and the model is never silently missing history.
 */
export function requestMessages(
  window: readonly WindowMessage[],
  limit: number,
  policy: PrunePolicy | number,
  memo?: PruneMemo,
  fresh?: FreshOutput,
): RequestPlan {
  const { pruned, costs: known } = prunedWindow(window, policy, memo, fresh)
  const costs = known.slice()
  let headEnd = 0
  while (headEnd < pruned.length && (pruned[headEnd]?.role === 'system' || pruned[headEnd]?.role === 'user')) headEnd++
  // With no summary the head is just the leading system/user messages of the conversation.
  let prunedTokens = 0
  for (const cost of costs) prunedTokens += cost
  let clipped = 0
  // Every item is bounded to fit: a 2 MB issue as the task, a huge comment or tool result
  // would otherwise make every request too long, and the task could never go on.
  const fit = (m: WindowMessage, i: number, cap: number): WindowMessage => {
    if ((costs[i] as number) <= cap || typeof m.content !== 'string') return m
    clipped++
    // A blob's output is cut after its reference: the model can read the rest with inspect.
    const blob = m.role === 'tool' ? leadingBlobId(m.content) : null
    const where = blob !== null ? `blob ${blob} (the inspect tool reads it)` : m.role === 'tool' ? 'tools.jsonl' : 'messages.jsonl'
    const cut: WindowMessage = { ...m, content: clipToTokens(m.content, cap, where) }
    costs[i] = estimateMessageTokens(cut)
    return cut
  }
  // Caps of at least 1,024 (head) and 512 tokens (after it): an item that small is never the problem.
  const head = pruned.slice(0, headEnd).map((m, i) => fit(m, i, Math.max(1024, Math.floor(limit * MAX_HEAD_SHARE))))
  let headTokens = 0
  for (let i = 0; i < headEnd; i++) headTokens += costs[i] as number
  let budget = limit - headTokens
  const body = pruned.slice(headEnd).map((m, i) => fit(m, headEnd + i, Math.max(512, Math.floor(budget * MAX_RESULT_SHARE))))
  let start = body.length
  while (start > 0) {
    const cost = costs[headEnd + start - 1] as number
    if (cost > budget) break
    budget -= cost
    start--
  }
  while (start < body.length && body[start]?.role === 'tool') start++
  const kept = body.slice(start)
  const dropped = start
  const note: WindowMessage[] =
    dropped > 0
      ? [
          {
            role: 'user',
            content: `[${dropped} earlier message(s) of this task are left out of this request: they did not fit the model's context. The whole history is on disk in messages.jsonl; the summary above covers what came before it.]`,
          },
        ]
      : []
  const messages = [...head, ...note, ...kept]
  // The request's tokens from the costs already known (a window of thousands is not looked up again).
  let tokens = headTokens + windowTokens(note)
  for (let i = headEnd + start; i < costs.length; i++) tokens += costs[i] as number
  return { messages, tokens, prunedTokens, dropped, clipped }
}

/**
 * What the last plan of a window pruned, kept by its caller (WindowKeeper) for the next:
 * a window only grows by push (or is replaced whole), and the prune boundary only moves
 * forward as it grows, so the messages before the last boundary are pruned copies
 * already, with their estimates. A turn then looks up only its new messages and those
 * the boundary passed, not the whole window.
 */
export interface PruneMemo {
  last?: {
    window: readonly WindowMessage[]
    length: number
    policy: PrunePolicy | number
    boundary: number
    pruned: readonly WindowMessage[]
    costs: readonly number[]
  }
}

/** The window pruned, and each message's estimate: from `memo` where it still holds, then recorded in it. */
/**
 * A message after the prune boundary as the request sends it: a tool result stored as a
 * blob reference is sent whole (../storage/blob/expand.js). The same object for the
 * same message, so that its estimate is reused and its bytes never change.
 */
export type FreshOutput = (message: WindowMessage) => WindowMessage

function prunedWindow(
  window: readonly WindowMessage[],
  policy: PrunePolicy | number,
  memo?: PruneMemo,
  fresh?: FreshOutput,
): { pruned: readonly WindowMessage[]; costs: readonly number[] } {
  const boundary = pruneBoundary(window, policy)
  const last = memo?.last
  // Reused up to the last boundary: those entries are pruned copies of the same messages.
  const reuse =
    last !== undefined && last.window === window && last.policy === policy && last.length <= window.length && last.boundary <= boundary ? last.boundary : 0
  const pruned: WindowMessage[] = reuse > 0 ? (last as NonNullable<PruneMemo['last']>).pruned.slice(0, reuse) : []
  const costs: number[] = reuse > 0 ? (last as NonNullable<PruneMemo['last']>).costs.slice(0, reuse) : []
  for (let i = reuse; i < window.length; i++) {
    const message = i < boundary ? prunedMessage(window[i] as WindowMessage) : fresh ? fresh(window[i] as WindowMessage) : (window[i] as WindowMessage)
    pruned.push(message)
    costs.push(estimateMessageTokens(message))
  }
  if (memo !== undefined) memo.last = { window, length: window.length, policy, boundary, pruned, costs }
  return { pruned, costs }
}

/** Text cut to about `tokens` tokens, head and tail kept, with a note of what is missing and where the whole is. */
function clipToTokens(text: string, tokens: number, where: string): string {
  const chars = Math.max(200, tokens * 4 - 200)
  if (text.length <= chars) return text
  const head = Math.floor(chars * 0.7)
  const tail = chars - head
  return `${text.slice(0, head)}\n[… ${grouped(text.length - chars)} characters cut from this request to fit the context; the whole is in ${where} …]\n${text.slice(-tail)}`
}

export interface AutoCompressOptions {
  summarizer: Summarizer
  settings: CompactionSettings
  /** compressionLimit(config, contextLength) from ./compaction.js */
  limit: number
  /**
   * The caller's count of the next request: the provider's report when plausible, else
   * the estimate of the pruned request. Default: the estimate of the whole window.
   */
  requestTokens?: number | null
  now: () => Date
  warn: (message: string) => void
  /** Compress whenever there is enough to summarize, under the limit too (a `compress` request, a context-length error). */
  force?: boolean
  /** The control request this compaction answers, recorded in summaries.jsonl. */
  requestId?: string
}

/**
 * The owner's compaction step, run before each request: when the request would be over
 * the limit, status `compressing`, summarize, back to `processing`. Best effort: a
 * failed summary is a warning, nothing changes, and the next turn tries again.
 */
export async function compressIfNeeded(handle: TaskHandle, options: AutoCompressOptions): Promise<CompactionResult | null> {
  const tokens = options.requestTokens ?? handle.windowTokens()
  // The cheap check first: most turns are under the limit and read nothing.
  if (options.force !== true && tokens <= options.limit) return null
  const plan = planCompaction(await loadSnapshot(handle.dir), options.settings)
  if (options.force === true ? plan === null : !shouldCompress(plan, options.limit, tokens)) return null
  await handle.setStatus('compressing', 'compressing')
  const requestId = options.requestId
  const sink: CompactionSink =
    requestId === undefined
      ? handle
      : { addSummary: (r) => handle.addSummary({ ...r, request_id: requestId }), replaceCurrent: (w) => handle.replaceCurrent(w) }
  try {
    const result = await compact(plan as CompactionPlan, options.summarizer, sink, options.now())
    // TaskHandle.update counts the compressions from summaries.jsonl itself.
    const usage = result.record.usage
    await handle.update({
      status: 'processing',
      last_activity: 'compressed',
      current_context_tokens: result.tokensAfter,
      ...(usage ? { compaction_tokens: addUsage(handle.state.compaction_tokens, usage) } : {}),
    })
    return result
  } catch (err) {
    if (handle.lost) throw err
    options.warn(`compression of task ${handle.uuid} failed; the window stays as it was and the next turn retries (${(err as Error).message})`)
    await handle.setStatus('processing', 'compression failed')
    return null
  }
}

/**
 * The provider's prompt_tokens when it is plausible, else the estimate: a server or
 * proxy that under-reports (a stub answering 1,000 every time) must not switch
 * compaction off. A report below half the estimate is not believed (chars/4 rarely
 * overestimates by 2×); a report above it is (the tokenizer knows best). Requests under
 * 1,024 estimated tokens are not judged.
 */
const MIN_JUDGED = 1024

export function plausibleTokens(reported: number | null, estimate: number): { tokens: number; believed: boolean } {
  if (reported === null) return { tokens: estimate, believed: true }
  // Small requests are not judged: fixed overheads (tool specs, templates) dominate them.
  if (estimate >= MIN_JUDGED && reported * 2 < estimate) return { tokens: estimate, believed: false }
  return { tokens: reported, believed: true }
}
