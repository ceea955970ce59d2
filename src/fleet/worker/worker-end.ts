import type { Ended, Job, JobEnd } from '../queue/job.js'
import type { JobQueue } from '../queue/job-queue.js'
import type { WorkerOptions } from './worker-options.js'

/** What ending a job needs of its worker: its queue, whether it stops, and its wait that a stop cuts short. */
export interface EndHost {
  options: WorkerOptions
  queue: JobQueue
  stopping: () => boolean
  pause: (ms: number) => Promise<void>
}

/** Ends the job in PostgreSQL, retrying while it is away (a job left running would wait for a reaper). */
export async function finishJob(host: EndHost, job: Job, end: JobEnd): Promise<void> {
  const resume = end.resume === true
  const outcome = { ...end, resume }
  for (let attempt = 0; ; attempt++) {
    try {
      const ended = await host.queue.finish(job, host.options.record.id, outcome)
      logJobEnd(host.options, job, end, ended)
      return
    } catch (err) {
      if (host.stopping()) {
        // A stop ends every wait (docs/contract.md §14.5): the job stays claimed by this stopped worker, and watch-locks settles it
        // from what its task became once the database is back (docs/contract.md §14.3), its resume queued as this worker would have.
        host.options.log(`job ${job.id} not ended (${(err as Error).message}); stopping: watch-locks settles it once the database is back`)
        return
      }
      if (attempt % 10 === 0) host.options.log(`job ${job.id} not ended yet (${(err as Error).message}); retrying`)
      await host.pause(Math.min(100 * 2 ** attempt, 5_000))
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
