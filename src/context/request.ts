import type { TaskHandle } from '../storage/task/handle.js'
import type { WindowMessage } from '../storage/format/records.js'
import { estimateMessageTokens, windowTokens } from '../storage/format/tokens.js'
import { compact, planCompaction, shouldCompress } from './compaction.js'
import type { CompactionPlan, CompactionResult, CompactionSettings, CompactionSink } from './compaction.js'
import { loadSnapshot } from './snapshot.js'
import { prune } from './prune.js'
import type { Summarizer } from './summarizer.js'

/**
 * The messages of one LLM request (SPEC §5): the window's head (system prompt,
 * original task, summary: everything before the first assistant or tool message)
 * always, then the newest messages that fit in `limit` tokens, without ever starting
 * on a tool result whose call was left out; then pruned. A copy: the window and the
 * files are never changed.
 */
export function requestMessages(window: readonly WindowMessage[], limit: number, protectedTurns: number): WindowMessage[] {
  let headEnd = 0
  while (headEnd < window.length && (window[headEnd]?.role === 'system' || window[headEnd]?.role === 'user')) headEnd++
  // With no summary the head is just the leading system/user messages of the conversation.
  const head = window.slice(0, headEnd)
  let budget = limit - windowTokens(head)
  let start = window.length
  while (start > headEnd) {
    const cost = estimateMessageTokens(window[start - 1] as WindowMessage)
    if (cost > budget) break
    budget -= cost
    start--
  }
  while (start < window.length && window[start]?.role === 'tool') start++
  return prune([...head, ...window.slice(start)], protectedTurns)
}

export interface AutoCompressOptions {
  summarizer: Summarizer
  settings: CompactionSettings
  /** compressionLimit(config, contextLength) from ./compaction.js */
  limit: number
  /** The provider's prompt_tokens of the last request, preferred over the estimate. */
  reportedPromptTokens?: number | null
  now: () => Date
  warn: (message: string) => void
  /** Compress whenever there is enough to summarize, under the limit too (a `compress` request, a context-length error). */
  force?: boolean
  /** The control request this compaction answers, recorded in summaries.jsonl. */
  requestId?: string
}

/**
 * The owner's compaction step, run after each turn: when the window is over the
 * limit, status `compressing`, summarize, back to `processing`. Best effort: a
 * failed summary is a warning, nothing changes, and the next turn tries again.
 */
export async function compressIfNeeded(handle: TaskHandle, options: AutoCompressOptions): Promise<CompactionResult | null> {
  // The cheap check first: most turns are under the limit and read nothing.
  if (options.force !== true && (options.reportedPromptTokens ?? handle.windowTokens()) <= options.limit) return null
  const plan = planCompaction(await loadSnapshot(handle.dir), options.settings)
  if (options.force === true ? plan === null : !shouldCompress(plan, options.limit, options.reportedPromptTokens)) return null
  await handle.setStatus('compressing', 'compressing')
  const requestId = options.requestId
  const sink: CompactionSink = requestId === undefined ? handle : { addSummary: (r) => handle.addSummary({ ...r, request_id: requestId }), replaceCurrent: (w) => handle.replaceCurrent(w) }
  try {
    const result = await compact(plan as CompactionPlan, options.summarizer, sink, options.now())
    // TaskHandle.update counts the compressions from summaries.jsonl itself.
    await handle.update({ status: 'processing', last_activity: 'compressed', current_context_tokens: result.tokensAfter })
    return result
  } catch (err) {
    if (handle.lost) throw err
    options.warn(`compression of task ${handle.uuid} failed; the window stays as it was and the next turn retries (${(err as Error).message})`)
    await handle.setStatus('processing', 'compression failed')
    return null
  }
}
