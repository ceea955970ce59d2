import type { Job } from '../queue/job.js'
import { closeVerdict, taskSnapshot } from '../queue/task-outcome.js'
import type { CloseVerdict } from '../queue/task-outcome.js'
import { runChild } from './job-child.js'
import type { ChildExit } from './job-child.js'
import type { JobContext } from './job-context.js'
import { prepareJob } from './job-prepare.js'
import { settleJob } from './job-settle.js'
import type { Settled } from './job-settle.js'
import type { WorkerOptions } from './worker-options.js'

/**
 * A claimed job's life, from its claim to its settlement (docs/contract.md §14.2), each step
 * returning what the next one takes: prepared (or refused, or cancelled before its agent),
 * its task run in a child process of its own, the verdict decided from how that child ended
 * and what its task became, and the job settled in the queue. 'watch': another process runs
 * its task, and the worker ends the job when that run does.
 */
export async function jobLife(ctx: JobContext, job: Job): Promise<Settled> {
  const prepared = await prepareJob(ctx, job)
  if (prepared.kind !== 'start') return settleJob(ctx, job, prepared)
  const exit = await runChild(ctx, job, prepared)
  const verdict = decideVerdict(ctx.options, job, prepared.resume, exit)
  return settleJob(ctx, job, verdict)
}

/** What the job becomes now that its child closed (closeVerdict), from its task's files as they are. */
export function decideVerdict(options: WorkerOptions, job: Job, resume: boolean, exit: ChildExit): CloseVerdict {
  const task = taskSnapshot(options.layout, job.task_uuid, exit.pausedState)
  return closeVerdict(job, resume, exit, task, { maxAttempts: options.maxAttempts ?? 3, retry: options.retry })
}
