import { join } from 'node:path'
import { locateTask } from '../../storage/fs/layout.js'
import { safeState } from '../../storage/task/lifecycle.js'
import { holdForTest } from '../../test-pause.js'
import { cloneWorkspace } from '../../workspace/clone.js'
import type { Job, JobEnd } from '../queue/job.js'
import { claimKey } from './job-child.js'
import type { Running } from './job-child.js'
import type { JobQueue } from '../queue/job-queue.js'
import { jobProblem, resumeArgs, runArgs } from '../queue/job-spec.js'
import { completedEnd } from '../queue/task-outcome.js'
import type { WorkerOptions } from './worker-options.js'

/** What starting a job needs of its worker: its slots and queue, and its ways to end a job, start its child, follow a settling and wake. */
export interface StartHost {
  options: WorkerOptions
  queue: JobQueue
  running: Map<string, Running>
  end: (job: Job, end: JobEnd) => Promise<void>
  spawn: (job: Job, args: string[], resume: boolean) => void
  track: (settling: Promise<void>) => void
  wake: () => void
}

/**
 * Starts a claimed job, or ends it at once without an agent (a row that is not valid, a job
 * this worker refuses, a task already completed); any other is prepared (prepareJob).
 */
export function startJob(host: StartHost, job: Job): void {
  const problem = jobProblem(job)
  if (problem !== null) {
    // Written by hand, or by something else than enqueue: nothing of it is run (docs/contract.md §14.4).
    host.options.log(`job ${job.id}: not run, its row is not valid (${problem})`)
    host.track(host.end(job, { outcome: 'failed', error: `the job's row is not valid: ${problem}`.slice(0, 500) }).finally(() => host.wake()))
    return
  }
  const refusal = host.options.refuse?.(job) ?? null
  if (refusal !== null) {
    host.options.log(`job ${job.id}: not run, ${refusal}`)
    host.track(
      host
        .end(
          job,
          job.kind === 'resume' ? { outcome: 'paused', error: refusal.slice(0, 500) } : { outcome: 'failed', failed: true, error: refusal.slice(0, 500) },
        )
        .finally(() => host.wake()),
    )
    return
  }
  const existing = locateTask(host.options.layout, job.task_uuid)
  if (existing?.location === 'completed') {
    host.track(host.end(job, completedEnd(safeState(existing.dir), 'completed')))
    return
  }
  // A new job whose task exists already (an earlier attempt created it) continues it.
  const resume = job.kind === 'resume' || existing !== null
  host.track(prepareJob(host, job, resume))
}

/**
 * From the claim to the agent, holding a slot like a task does: a job cancelled since its
 * claim is not started, and neither is one cancelled during its `--repo` clone (the
 * repository is cloned first, into fleet.workspaces_dir/<uuid>, on the shared mount);
 * see docs/fleet.md#cancelling-a-job.
 */
export async function prepareJob(host: StartHost, job: Job, resume: boolean): Promise<void> {
  const placeholder: Running = { job, child: null, stopped: false, lastLine: '' }
  host.running.set(claimKey(job), placeholder)
  await holdForTest('worker:claimed')
  if (await notToStart(host, job, resume, placeholder)) return
  let workspace = job.spec.workspace
  if (!resume && job.spec.repo !== undefined) {
    if (host.options.workspacesDir === null) {
      host.running.delete(claimKey(job))
      await host.end(job, { outcome: 'failed', error: 'the repository was not cloned: fleet.workspaces_dir is not set on this host' })
      return
    }
    workspace = join(host.options.workspacesDir, job.task_uuid)
    // A cancel during the clone (deliverCancels) stops it: a large repository takes minutes.
    placeholder.clone = new AbortController()
    try {
      await cloneWorkspace({
        url: job.spec.repo,
        ...(job.spec.ref !== undefined ? { ref: job.spec.ref } : {}),
        dir: workspace,
        credentials: host.options.cloneCredentials ?? [],
        signal: placeholder.clone.signal,
      })
      host.options.giveClone?.(workspace)
    } catch (err) {
      if (placeholder.clone.signal.aborted && (await notToStart(host, job, resume, placeholder))) return
      host.running.delete(claimKey(job))
      await host.end(job, { outcome: 'failed', failed: true, error: `the repository was not cloned: ${(err as Error).message}`.slice(0, 500) })
      return
    }
    if (await notToStart(host, job, resume, placeholder)) return
  }
  host.running.delete(claimKey(job))
  host.spawn(job, resume ? resumeArgs(job.task_uuid, job.spec) : runArgs(job.task_uuid, job.spec, workspace), resume)
}

/**
 * True (and the slot freed, the job settled) when the claimed job must not start now: the
 * worker stopped (the job waits again as it was), an operator cancelled it (it ends
 * cancelled, its task untouched), or it is no longer this claim's. A database that does
 * not answer lets it start: a cancel then reaches the agent as it starts (deliverCancels).
 */
async function notToStart(host: StartHost, job: Job, resume: boolean, placeholder: Running): Promise<boolean> {
  const may = placeholder.stopped
    ? 'run'
    : await host.queue.mayStart(job, host.options.record.id).catch((err: Error) => {
        host.options.log(`job ${job.id}: cancel not looked at (${err.message}); starting it`)
        return 'run' as const
      })
  if (!placeholder.stopped && may === 'run') return false
  host.running.delete(claimKey(job))
  if (placeholder.stopped) await host.queue.release(job, host.options.record.id).catch(() => undefined)
  else if (may === 'gone') host.options.log(`job ${job.id}: no longer this worker's claim; not started`)
  else await host.end(job, { outcome: resume ? 'paused' : 'cancelled', error: 'cancelled before its agent started' })
  return true
}
