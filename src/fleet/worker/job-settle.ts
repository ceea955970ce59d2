import { setTimeout as delay } from 'node:timers/promises'
import { holdForTest } from '../../test-pause.js'
import type { Ended, Job, JobEnd } from '../queue/job.js'
import type { CloseVerdict } from '../queue/task-outcome.js'
import type { JobContext } from './job-context.js'
import type { WorkerOptions } from './worker-options.js'

/**
 * A job that got no child (job-prepare.ts): ended at once (`end`), stopped by its worker before
 * its agent started (`unstarted`: it waits again as it was), or no longer this worker's claim (`gone`).
 */
export type NotStarted = { kind: 'end'; end: JobEnd } | { kind: 'unstarted' } | { kind: 'gone' }

/** What becomes of a claimed job: its child's verdict (closeVerdict), or why it got none. */
export type Settlement = CloseVerdict | NotStarted

/** Settled in the queue (or left to watch-locks), or to be watched: another process runs its task, and the job ends when that run does. */
export type Settled = 'settled' | 'watch'

type SettleContext = Pick<JobContext, 'options' | 'queue' | 'stop'>

/** Carries the settlement out in the queue: the job ended, handed back, released, or left to whoever now has it. */
export async function settleJob(ctx: SettleContext, job: Job, settlement: Settlement): Promise<Settled> {
  const { options, queue } = ctx
  // Between a child's close and its job's settlement: a watch-locks pass must leave a live worker's job here (docs/contract.md §14.3).
  await holdForTest('worker:settling')
  const notHandedBack = (err: Error): void => options.log(`job ${job.id} not handed back (${err.message}): a reaper will`)
  switch (settlement.kind) {
    case 'end':
      await finishJob(ctx, job, settlement.end)
      return 'settled'
    case 'hand_back':
      await handBack(ctx, job, settlement).catch(notHandedBack)
      return 'settled'
    case 'release':
      options.log(`job ${job.id}: stopped before task ${job.task_uuid} began; handed back to the queue`)
      await queue.release(job, options.record.id).catch(notHandedBack)
      return 'settled'
    case 'unstarted':
      await queue.release(job, options.record.id).catch(() => undefined)
      return 'settled'
    case 'gone':
      options.log(`job ${job.id}: no longer this worker's claim; not started`)
      return 'settled'
    case 'elsewhere':
      options.log(`job ${job.id}: task ${job.task_uuid} is run by another process; the job ends when that run does`)
      return 'watch'
    case 'left_running':
      options.log(`job ${job.id}: task ${job.task_uuid} was left in running/ (${settlement.detail}); watch-locks recovers it`)
      return 'settled'
  }
}

/** Nothing ran: after its wait (cut short by a stop) the job waits again with this attempt counted, or ends after fleet.max_attempts. */
async function handBack(ctx: SettleContext, job: Job, verdict: Extract<CloseVerdict, { kind: 'hand_back' }>): Promise<void> {
  const { why, error, last, maxAttempts: max } = verdict
  await delay(verdict.waitMs, undefined, { signal: ctx.stop }).catch(() => undefined)
  const handed = await ctx.queue.retry(job, ctx.options.record.id, max, last)
  if (handed === 'gone') return
  const said =
    handed === 'waiting'
      ? `its agent ${why} before task ${job.task_uuid} began; handed back to the queue (attempt ${job.attempts} of ${max})`
      : handed === 'cancelled'
        ? `cancelled before task ${job.task_uuid} began (its agent ${why})`
        : `${last.outcome}: ${error}`
  ctx.options.log(`job ${job.id}: ${said}`)
}

/** Ends the job in PostgreSQL, retrying while it is away (a job left running would wait for a reaper). */
export async function finishJob(ctx: SettleContext, job: Job, end: JobEnd): Promise<void> {
  const resume = end.resume === true
  const outcome = { ...end, resume }
  for (let attempt = 0; ; attempt++) {
    try {
      const ended = await ctx.queue.finish(job, ctx.options.record.id, outcome)
      logJobEnd(ctx.options, job, end, ended)
      return
    } catch (err) {
      if (ctx.stop.aborted) {
        // A stop ends every wait (docs/contract.md §14.5): the job stays claimed by this stopped worker, and watch-locks settles it
        // from what its task became once the database is back (docs/contract.md §14.3), its resume queued as this worker would have.
        ctx.options.log(`job ${job.id} not ended (${(err as Error).message}); stopping: watch-locks settles it once the database is back`)
        return
      }
      if (attempt % 10 === 0) ctx.options.log(`job ${job.id} not ended yet (${(err as Error).message}); retrying`)
      await delay(Math.min(100 * 2 ** attempt, 5_000), undefined, { signal: ctx.stop }).catch(() => undefined)
    }
  }
}

/**
 * A job's end in the log: a retry is a warning, a failed job an error, anything else news. A wait for a usage limit
 * or a budget window is planned (docs/fleet-operations.md#waits): news, its reason and until when, never a warning.
 */
export function logJobEnd(options: Pick<WorkerOptions, 'log' | 'warn' | 'error'>, job: Job, end: JobEnd, ended: Ended | null): void {
  const o = options
  if (ended === null) return o.log(`job ${job.id}: ${end.outcome} (no longer this worker’s job)`)
  if (ended.wait !== undefined) {
    const until = end.wait?.until ?? 'its reset'
    return o.log(
      `job ${job.id}: ${end.outcome}; waits until ${until} (${ended.wait}${end.wait?.cap ? ` ${end.wait.cap}` : ''}; no attempt spent, its slot free meanwhile): ${end.error ?? ''}`,
    )
  }
  if (ended.state === 'retrying') return (o.warn ?? o.log)(`job ${job.id}: ${end.outcome}; retrying in ${ended.retry_in?.toFixed(1)}s (${end.error ?? ''})`)
  if (ended.state === 'failed') return (o.error ?? o.log)(`job ${job.id}: ${end.outcome} (job failed${end.error ? `: ${end.error}` : ''})`)
  // Its task completed, its delivery did not happen (docs/delivery.md#what-is-recorded): a warning with the reason.
  if (end.outcome === 'undelivered') return (o.warn ?? o.log)(`job ${job.id}: undelivered (job ${ended.state}): ${end.error ?? ''}`)
  o.log(`job ${job.id}: ${end.outcome}${ended.resumed ? ', its resume queued' : ` (job ${ended.state})`}`)
}
