import { join } from 'node:path'
import { locateTask } from '../../storage/fs/layout.js'
import { safeState } from '../../storage/task/lifecycle.js'
import { holdForTest } from '../../test-pause.js'
import { cloneWorkspace } from '../../workspace/clone.js'
import type { Job } from '../queue/job.js'
import { evalTrialArgs, jobProblem, resumeArgs, runArgs } from '../queue/job-spec.js'
import { completedEnd } from '../queue/task-outcome.js'
import { claimKey } from './job-context.js'
import type { JobContext, Running } from './job-context.js'
import type { NotStarted } from './job-settle.js'

/** A job ready for its agent: the arguments of its `run` (or `run --resume`), its slot held. */
export interface Start {
  kind: 'start'
  args: string[]
  resume: boolean
}

/**
 * From the claim to the agent's arguments: a job is ended at once without an agent (a row that is not
 * valid, a job this worker refuses, a task already completed), or it takes a slot, as a task does,
 * until its child starts (runChild). A job cancelled since its claim is not started, and neither is one
 * cancelled during its `--repo` clone (the repository is cloned first, into fleet.workspaces_dir/<uuid>,
 * on the shared mount); see docs/fleet.md#cancelling-a-job. Everything up to the slot is synchronous:
 * the worker's claim loop sees the slot taken before it claims again.
 */
export async function prepareJob(ctx: JobContext, job: Job): Promise<Start | NotStarted> {
  const { options } = ctx
  const problem = jobProblem(job)
  if (problem !== null) {
    // Written by hand, or by something else than enqueue: nothing of it is run (docs/contract.md §14.4).
    options.log(`job ${job.id}: not run, its row is not valid (${problem})`)
    return { kind: 'end', end: { outcome: 'failed', error: `the job's row is not valid: ${problem}`.slice(0, 500) } }
  }
  const refusal = options.refuse?.(job) ?? null
  if (refusal !== null) {
    options.log(`job ${job.id}: not run, ${refusal}`)
    const error = refusal.slice(0, 500)
    return { kind: 'end', end: job.kind === 'resume' ? { outcome: 'paused', error } : { outcome: 'failed', failed: true, error } }
  }
  const existing = locateTask(options.layout, job.task_uuid)
  // An eval's trial whose task completed may still lack its verdict (its worker stopped before the check): `eval trial` judges it.
  if (existing?.location === 'completed' && job.spec.eval === undefined) return { kind: 'end', end: completedEnd(safeState(existing.dir), 'completed') }
  // A new job whose task exists already (an earlier attempt created it) continues it.
  const resume = job.kind === 'resume' || existing !== null
  const slot: Running = { job, child: null, stopped: false, lastLine: '' }
  ctx.slots.set(claimKey(job), slot)
  const ready = await workspaceFor(ctx, job, resume, slot)
  // Kept for its child when it starts (runChild takes the slot over); freed when it does not.
  if (ready.kind !== 'start') ctx.slots.delete(claimKey(job))
  return ready
}

/** The job's arguments once its workspace is there (a `--repo` job's clone made), or why it is not started. */
async function workspaceFor(ctx: JobContext, job: Job, resume: boolean, slot: Running): Promise<Start | NotStarted> {
  await holdForTest('worker:claimed')
  const before = await notToStart(ctx, job, resume, slot)
  if (before !== null) return before
  const start = (workspace: string | undefined): Start => ({
    kind: 'start',
    args:
      job.spec.eval !== undefined
        ? evalTrialArgs(job.task_uuid, job.spec)
        : resume
          ? resumeArgs(job.task_uuid, job.spec)
          : runArgs(job.task_uuid, job.spec, workspace),
    resume,
  })
  if (resume || job.spec.repo === undefined) return start(job.spec.workspace)
  const { options } = ctx
  if (options.workspacesDir === null)
    return { kind: 'end', end: { outcome: 'failed', error: 'the repository was not cloned: fleet.workspaces_dir is not set on this host' } }
  const workspace = join(options.workspacesDir, job.task_uuid)
  // A cancel during the clone (deliverCancels) stops it: a large repository takes minutes.
  slot.clone = new AbortController()
  try {
    await cloneWorkspace({
      url: job.spec.repo,
      ...(job.spec.ref !== undefined ? { ref: job.spec.ref } : {}),
      dir: workspace,
      credentials: options.cloneCredentials ?? [],
      signal: slot.clone.signal,
    })
    options.giveClone?.(workspace)
  } catch (err) {
    const cancelled = slot.clone.signal.aborted ? await notToStart(ctx, job, resume, slot) : null
    if (cancelled !== null) return cancelled
    return { kind: 'end', end: { outcome: 'failed', failed: true, error: `the repository was not cloned: ${(err as Error).message}`.slice(0, 500) } }
  }
  return (await notToStart(ctx, job, resume, slot)) ?? start(workspace)
}

/**
 * Why the claimed job must not start now, or null: the worker stopped (the job waits again as it
 * was), an operator cancelled it (it ends cancelled, its task untouched), or it is no longer this
 * claim's. A database that does not answer lets it start: a cancel then reaches the agent as it
 * starts (deliverCancels).
 */
async function notToStart(ctx: JobContext, job: Job, resume: boolean, slot: Running): Promise<NotStarted | null> {
  if (slot.stopped) return { kind: 'unstarted' }
  const may = await ctx.queue.mayStart(job, ctx.options.record.id).catch((err: Error) => {
    ctx.options.log(`job ${job.id}: cancel not looked at (${err.message}); starting it`)
    return 'run' as const
  })
  // A stop that came while the database answered wins: the job waits again as it was.
  if (slot.stopped) return { kind: 'unstarted' }
  if (may === 'run') return null
  if (may === 'gone') return { kind: 'gone' }
  return { kind: 'end', end: { outcome: resume ? 'paused' : 'cancelled', error: 'cancelled before its agent started' } }
}
