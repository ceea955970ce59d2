import type { Outcome } from '../../run/outcome.js'
import { VANISHED } from '../../storage/lock/lock.js'
import { CtxError, UNDELIVERED_EXIT } from '../../errors.js'
import { deliveryLine } from '../../storage/task/delivery.js'
import { forTerminal } from '../../terminal-text.js'
import { grouped } from '../../text.js'

// How `run` shows its outcome: the lines on stdout, and the error (message, hint, exit code) a run that did not complete ends with.

export function renderOutcome(o: Outcome): string {
  const seconds = (o.duration_ms / 1000).toFixed(1)
  const lines = [
    `task ${o.uuid} ${o.status}${o.finish_status === 'blocked' ? ' (blocked)' : ''} after ${o.turns} turn(s), ${grouped(o.tokens)} tokens, ${seconds}s`,
  ]
  if (o.inherited_from) lines.push(`inherited from: ${o.inherited_from}`)
  // The answer and the reason are the model's and the server's words: no escape sequence of theirs reaches a terminal.
  if (o.final_answer) lines.push('', forTerminal(o.final_answer.trim()), '')
  if (o.error) lines.push(`reason: ${forTerminal(o.error)}`)
  // The PR, or why there is none (docs/delivery.md#what-is-recorded): a delivery that did not happen is never silent.
  if (o.delivery) lines.push(forTerminal(`${o.delivery.refused === null ? 'delivered: ' : ''}${deliveryLine(o.delivery)}`))
  if (o.status !== 'lost') lines.push(`files: ${o.dir}`)
  if (o.status === 'paused') lines.push(`resume: ctxagent run --resume ${o.uuid}`)
  if (o.status === 'timeout') lines.push(`continue: ctxagent run --resume ${o.uuid} --max-turns N (or --max-tokens, --timeout), a budget above what it used`)
  return lines.join('\n')
}

/** `inFleet`: run by a worker, which queues the resume of a task its stop paused and retries a passing LLM failure (docs/contract.md §14.4). */
export function outcomeError(o: Outcome, inFleet: boolean): CtxError {
  if (o.status === 'completed' && o.exit_code === UNDELIVERED_EXIT)
    return new CtxError(`task ${o.uuid} completed, but its change was not delivered: ${o.delivery?.refused ?? 'unknown'}`, {
      exitCode: UNDELIVERED_EXIT,
      hint: `the workspace keeps the change; see ctxagent view ${o.uuid.slice(0, 8)}`,
    })
  if (o.status === 'paused') {
    const hint = inFleet
      ? o.exit_code === 1
        ? 'the fleet retries it if the LLM side failed for a while; see ctxagent jobs --task ' + o.uuid.slice(0, 8)
        : 'its worker queued its resume'
      : `resume it with ctxagent run --resume ${o.uuid}`
    return new CtxError(`task ${o.uuid} paused${o.error ? `: ${o.error}` : ''}`, { exitCode: o.exit_code, hint })
  }
  if (o.status === 'timeout')
    return new CtxError(`task ${o.uuid} ran out of budget: ${o.error}`, {
      exitCode: 5,
      hint: `continue it with a raised budget: ctxagent run --resume ${o.uuid.slice(0, 8)} --max-turns N (or --max-tokens, --timeout)`,
    })
  if (o.status === 'setup_failed')
    return new CtxError(`task ${o.uuid} ended setup_failed: ${o.error}`, {
      exitCode: o.exit_code,
      hint: `see its setup log (${o.dir}/setup.log) and the repository's environment (docs/environments.md)`,
    })
  if (o.status === 'lost') {
    const vanished = o.error?.includes(VANISHED) === true
    return new CtxError(`task ${o.uuid}: ${o.error}`, {
      exitCode: 1,
      hint: vanished
        ? 'its files are gone; keep the task tree out of reach of the agent (outside its workspace) and start the task again'
        : 'another process took the task over; this one stopped writing',
    })
  }
  return new CtxError(`task ${o.uuid} failed: ${o.error}`, { exitCode: 1, hint: `see ctxagent view ${o.uuid.slice(0, 8)} --tools` })
}

/**
 * A paused task's planned wait (docs/running.md#waits): paused until a usage limit lifts (rate-limit) or a budget
 * window resets (budget), with the time; null for every other ending, which is no wait.
 */
export function plannedWait(o: Outcome): { wait_reason: 'rate-limit' | 'budget'; wait_until: string } | null {
  if (o.status !== 'paused' || o.resume_at === undefined || o.resume_at === null) return null
  return o.paused_by === 'rate-limit' || o.paused_by === 'budget' ? { wait_reason: o.paused_by, wait_until: o.resume_at } : null
}
