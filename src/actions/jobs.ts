import { join } from 'node:path'
import type { Pool } from 'pg'
import type { CommandEnv } from '../command-env.js'
import { cancelJob, jobState, retryJob } from '../fleet/queue/job-admin.js'
import type { JobKind, JobState } from '../fleet/queue/job.js'
import { askOwner } from '../run/control.js'
import { locateTask } from '../storage/fs/layout.js'
import type { Location } from '../storage/fs/layout.js'
import type { Actor } from './actor.js'
import { actorName, auditAction } from './actor.js'
import { fleetPool } from './fleet-db.js'
import { evalsDir, trialRecorded } from '../eval/store.js'

/**
 * What a cancel came to. `task`: where its task is (`not_started` when it has not been
 * created), or for a running job whose task was asked to pause: `paused`, `finished`
 * (before it could pause), `asked` (not paused within the wait; it will at its next turn
 * boundary). `state`: the job's row now — `cancelled`, or `running` while its worker has
 * yet to end it (the row shows "running (cancelling)" until then).
 */
export interface CancelOutcome {
  job: number
  task_uuid: string
  was: JobState
  task: Location | 'not_started' | 'finished' | 'asked'
  state: JobState
}

/** How often the row of a cancelled running job is read while its worker ends it. */
const ROW_POLL_MS = 100

/**
 * Cancels a job: a waiting or retrying one never runs; a running one is marked and its
 * task asked to pause, as `ctxagent pause` asks it, within `waitMs`; then, in what is left
 * of the wait, its worker ends the job `cancelled`, so that what is said and the job's
 * row agree.
 */
export async function cancelJobAction(ctx: CommandEnv, id: number, actor: Actor, waitMs: number): Promise<CancelOutcome> {
  const deadline = Date.now() + waitMs
  const { pool } = await fleetPool(ctx, actor.via === 'serve' ? 'serve' : 'jobs', 1)
  try {
    const cancelled = await cancelJob(pool, id)
    auditAction(ctx, actor, 'jobs cancel', cancelled.task_uuid)
    const uuid = cancelled.task_uuid
    const outcome = (task: CancelOutcome['task'], state: JobState): CancelOutcome => ({ job: id, task_uuid: uuid, was: cancelled.was, task, state })
    const location = locateTask(ctx.layout, uuid)?.location ?? null
    if (cancelled.was !== 'running') return outcome(location ?? 'not_started', 'cancelled')
    // Claimed but its agent not started (a clone under way): its worker ends it at once, the row says so then.
    if (location !== 'running') return outcome(location ?? 'not_started', await endedBy(pool, id, deadline))
    const asked = await askOwner(
      ctx.layout,
      { uuid, location: 'running', dir: ctx.layout.taskDir('running', uuid) },
      'pause',
      actorName(ctx, actor),
      waitMs,
      () => ctx.now(),
    )
    const task = asked.location === 'paused' ? 'paused' : asked.location === 'completed' ? 'finished' : 'asked'
    if (task === 'asked') return outcome(task, 'running')
    return outcome(task, await endedBy(pool, id, deadline))
  } finally {
    await pool.end().catch(() => undefined)
  }
}

/** The job's state once its worker has ended it, or at `deadline`, whichever comes first. */
async function endedBy(pool: Pool, id: number, deadline: number): Promise<JobState> {
  for (;;) {
    const state = (await jobState(pool, id)) ?? 'cancelled'
    if (state !== 'running' || Date.now() >= deadline) return state
    await new Promise((resolve) => setTimeout(resolve, ROW_POLL_MS))
  }
}

export interface RetryOutcome {
  job: number
  task_uuid: string
  /** new: it starts its task; resume: it resumes the task, which exists. */
  kind: JobKind
  /** What it was: failed or cancelled (it waits again), done (an eval trial with no verdict: it waits again), or retrying, waiting out a usage limit too (it runs now). */
  was: JobState
}

/** Runs a failed or cancelled job (or an eval trial's that ended without a verdict) again (it waits, as a resume when its task exists), or a retrying one now. */
export async function retryJobAction(ctx: CommandEnv, id: number, actor: Actor): Promise<RetryOutcome> {
  const { pool } = await fleetPool(ctx, actor.via === 'serve' ? 'serve' : 'jobs', 1)
  try {
    const again = await retryJob(pool, id, {
      location: (uuid) => locateTask(ctx.layout, uuid)?.location ?? null,
      judged: (trial) => trialRecorded(join(evalsDir(ctx.layout.base), trial.id), trial),
    })
    auditAction(ctx, actor, 'jobs retry', again.task_uuid)
    return { job: id, task_uuid: again.task_uuid, kind: again.kind, was: again.was }
  } finally {
    await pool.end().catch(() => undefined)
  }
}
