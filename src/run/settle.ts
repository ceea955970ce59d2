import { createFinalSummary } from '../context/final-summary.js'
import { extractiveSummary } from '../context/extractive.js'
import { loadSnapshot } from '../context/snapshot.js'
import type { Config } from '../config/schema.js'
import type { LlmClient } from '../llm/client.js'
import { ReplayClient } from '../llm/replay.js'
import { maskText } from '../storage/format/mask.js'
import type { StoredMessage } from '../storage/format/records.js'
import type { Layout } from '../storage/fs/layout.js'
import type { TaskHandle } from '../storage/task/handle.js'
import { boundAnswer } from '../storage/task/state.js'
import { explainSystemError, isDiskFull } from '../system-errors.js'
import { UNDELIVERED_EXIT } from '../errors.js'
import { deliveryResult, undelivered } from '../storage/task/delivery.js'
import { grouped } from '../text.js'
import { ChatLoop } from './chat.js'
import { deliverCompleted } from './delivery-step.js'
import type { Ending } from './ending.js'
import type { RunLog } from './log.js'
import type { Outcome } from './outcome.js'
import type { Agent } from './turn.js'

// How a run ends and what it records: the ending settled into state.json and the tree, or an error recorded.

type Progress = ReturnType<Agent['progress']>

/** What settling a run is given: its task, how its loop ended, what it spent, and who summarises and delivers. */
export interface SettleInput {
  handle: TaskHandle
  ending: Ending
  progress: Progress
  /** Writes the final summary (a replay client: an extractive one). */
  summaryClient: LlmClient
  log: RunLog
  config: Config
  /** The task tree (delivery removes the task's own worktree under it). */
  layout: Layout
  /** Run by a fleet's worker: a pause it resumes by itself is not advised to be resumed by hand. */
  inFleet: boolean
}

/** Settles the task as its ending says (delivering a completed one first), and says how it went. */
export async function settle(input: SettleInput): Promise<Omit<Outcome, 'duration_ms' | 'inherited_from'>> {
  const { handle, ending, progress, summaryClient: client, log, config, layout, inFleet } = input
  const maxAnswer = config.run.max_answer_chars
  const summaryMaxTokens = config.context.compression.summary_max_tokens
  const base = { uuid: handle.uuid, turns: progress.turns, tokens: progress.total_tokens_used, final_answer: null, finish_status: null, error: null }
  if (ending.kind === 'lost') {
    log.warn(ending.error.message)
    return { ...base, status: 'lost', location: 'unknown', dir: handle.dir, error: ending.error.message, exit_code: 1 }
  }
  if (ending.kind === 'completed') {
    if (ending.answer.length > maxAnswer)
      log.warn(
        `the final answer is ${grouped(ending.answer.length)} characters; state.json keeps the first ${grouped(maxAnswer)} (run.max_answer_chars), messages.jsonl the whole`,
      )
    await handle.update({
      ...progress,
      final_answer: boundAnswer(maskText(ending.answer), maxAnswer),
      finish_status: ending.finishStatus,
      ...(ending.sessionEnded ? { session: ChatLoop.ended(new Date()) } : {}),
    })
    if (ending.answer.trim() !== '') handle.addPlan('outcome', ending.answer.slice(0, 4000))
    // Delivered while the task is still in running/ and its owner's: a crash during it resumes to deliver again (idempotently).
    const delivery = await deliverCompleted(handle, config, layout, log, ending.answer, ending.finishStatus)
    const summary = await finalSummaryText(handle, client, log, summaryMaxTokens)
    await handle.complete(summary)
    log.info(`completed${ending.finishStatus === 'blocked' ? ' (blocked)' : ''} after ${progress.turns} turn(s)`)
    return {
      ...base,
      status: 'completed',
      location: 'completed',
      dir: handle.dir,
      final_answer: ending.answer,
      finish_status: ending.finishStatus,
      // Completed all the same (its answer stands), but a delivery asked for that did not happen is its own exit (docs/contract.md §9).
      exit_code: undelivered(delivery) ? UNDELIVERED_EXIT : 0,
      ...(delivery !== null ? { delivery, delivery_result: deliveryResult(delivery) } : {}),
    }
  }
  if (ending.kind === 'timeout' || ending.kind === 'failed') {
    handle.addPlan('outcome', `${ending.kind}: ${ending.reason}`)
    await handle.update(progress)
    await handle.fail(ending.reason, ending.kind === 'timeout' ? 'timeout' : 'failed')
    log.warn(`${ending.kind}: ${ending.reason}`)
    return { ...base, status: ending.kind, location: 'completed', dir: handle.dir, error: ending.reason, exit_code: ending.kind === 'timeout' ? 5 : 1 }
  }
  // A budget or a usage limit: which cap, and when the task may go on by itself (docs/running.md#budgets).
  const waits =
    ending.cause === 'budget' || ending.cause === 'rate-limit'
      ? { resume_at: ending.resumeAt?.toISOString() ?? null, budget_cap: ending.budgetCap ?? null }
      : { resume_at: null, budget_cap: null }
  const failure = ending.cause === 'llm' ? (ending.failure ?? null) : ending.cause === 'rate-limit' ? 'rate_limited' : null
  await handle.update({ ...progress, error: ending.error === null ? null : maskText(ending.error), llm_failure: failure, ...waits })
  // Who paused it: a fleet resumes a task stopped by a signal (its worker stopped), not one an operator paused (docs/contract.md §14.3).
  const pausedBy = ({ SIGINT: 'signal', SIGTERM: 'signal', pause: 'operator', llm: 'llm', budget: 'budget', 'rate-limit': 'rate-limit' } as const)[ending.cause]
  await handle.pause(pausedBy)
  const paused = { status: 'paused', location: 'paused', dir: handle.dir, error: ending.error, paused_by: pausedBy, ...waits }
  const exit = { SIGINT: 130, SIGTERM: 143, pause: 0, llm: 1, budget: 5, 'rate-limit': 1 }[ending.cause]
  if (ending.cause === 'budget' || ending.cause === 'rate-limit') {
    const later = waits.resume_at === null ? '' : ` after ${waits.resume_at}`
    const how =
      ending.cause === 'budget'
        ? `ctxagent run --resume ${handle.uuid}${later}, or with the cap raised${ending.budgetCap === 'task' ? ' (--max-cost)' : ''}`
        : `ctxagent run --resume ${handle.uuid}${later}`
    log.info(`paused (${ending.cause}: ${ending.error}); ${inFleet && waits.resume_at !== null ? 'the fleet runs it again then' : `resume with: ${how}`}`)
    return { ...base, ...paused, exit_code: exit }
  }
  // In a fleet, a task stopped by its worker's signal is queued again by the worker, and one the LLM side failed is retried: no advice to resume by hand.
  const fleetResumes = inFleet && (ending.cause === 'SIGINT' || ending.cause === 'SIGTERM' || (ending.cause === 'llm' && (ending.failure ?? null) !== null))
  const next = fleetResumes
    ? ending.cause === 'llm'
      ? 'the fleet runs it again later'
      : 'its resume is queued by its worker'
    : `resume with: ctxagent run --resume ${handle.uuid}`
  log.info(`paused (${ending.cause === 'llm' ? `the LLM failed: ${ending.error}` : ending.cause}); ${next}`)
  return { ...base, ...paused, exit_code: exit }
}

/**
 * final_summary.txt (docs/contract.md §5): the LLM's summary of the whole task; without an LLM
 * (replay), or when the LLM fails, an extractive one of the last summary and the window.
 */
async function finalSummaryText(handle: TaskHandle, client: LlmClient, log: RunLog, maxTokens: number): Promise<string> {
  if (!(client instanceof ReplayClient)) {
    try {
      const { text, usage } = await createFinalSummary(handle.dir, client, maxTokens)
      // Its cost apart from the turns' (docs/contract.md §2.2): made once, at the end.
      await handle.update({ final_summary_tokens: usage })
      return text
    } catch (err) {
      log.warn(`final summary by the LLM failed (${(err as Error).message}); writing an extractive one`)
    }
  }
  const snapshot = await loadSnapshot(handle.dir)
  return extractiveSummary(snapshot.summary?.summary ?? null, snapshot.after as StoredMessage[], snapshot.task)
}

/** An error that is not an ending: recorded (unless the task is no longer ours); the caller reports it. */
export async function recordError(handle: TaskHandle, err: unknown, base: string, log: RunLog): Promise<void> {
  if (handle.lost) return
  const full = explainSystemError(err, base)
  if (full && isDiskFull(err, base)) {
    // The disk, not the task, failed: paused (when even that can be written) to resume once there is room.
    log.warn(`pausing: ${full.message}; resume with: ctxagent run --resume ${handle.uuid} once there is room`)
    await handle
      .update({ error: full.message })
      .then(() => handle.pause('disk'))
      .catch(() => handle.abandon(full.message))
      .catch(() => undefined)
  } else {
    log.warn(`task failed: ${(err as Error).message}`)
    await handle.fail((err as Error).message).catch(() => undefined)
  }
}

/** A run whose loop drained with its task unsettled (drain-guard.ts): paused with why, to be resumed. */
export async function pauseStalled(handle: TaskHandle, err: Error, log: RunLog): Promise<void> {
  if (handle.lost) return
  log.warn(`pausing: ${err.message}`)
  await handle
    .update({ error: err.message })
    .then(() => handle.pause())
    .catch(() => handle.abandon(err.message))
    .catch(() => undefined)
}
