import type { Pool } from 'pg'
import type { Config } from '../../config/schema.js'
import type { PassResult } from '../../operations/monitor.js'
import type { Layout, Location } from '../../storage/fs/layout.js'
import { locateTask } from '../../storage/fs/layout.js'
import { safeState } from '../../storage/task/lifecycle.js'
import type { PausedBy, TaskState } from '../../storage/task/state.js'
import { rollUpTallies } from '../../storage/index/fleet-tallies.js'
import { inTransaction } from '../../storage/index/pg-pool.js'
import { pauseAtForTest } from '../../test-pause.js'
import { endJob, requeueNotBegun } from '../queue/job-end.js'
import { llmOutage } from '../queue/retry-policy.js'
import { completedEnd, limitedEnd } from '../queue/task-outcome.js'
import type { JobEnd } from '../queue/job.js'
import { liveWorkerSql } from '../../storage/index/worker-liveness.js'

export interface FleetPassResult {
  result: PassResult
  /** Jobs settled for workers that died or tasks that were reaped: job id → what became of it. */
  settled: { job: number; task: string; outcome: string; resumed: boolean }[]
}

interface OpenJob {
  id: number
  task_uuid: string
  kind: string
  spec: unknown
  priority: number
  attempts: number
  claimed_at: Date | null
  worker_live: boolean
  died: number
}

/**
 * watch-locks in a fleet (docs/contract.md §14.3), run by the holder of the pass's lease (lease.ts:
 * one pass at a time fleet-wide, freed when the pass ends or expires when its host dies). Tasks
 * of running jobs whose owner died are reaped to paused/ (fleet.recovery: resume, while
 * fewer than fleet.max_attempts runs died) and their resumes queued. Every pass then
 * reconciles jobs and tree: a running job whose task has left running/ (or was never made,
 * its worker dead) is settled from what its task became — so a pass killed between a
 * task's move and its job's settlement is completed by the next one (docs/contract.md §14.5).
 * The pass also rolls up the fleet's tallies.
 */
export async function fleetPass(
  pool: Pool,
  layout: Layout,
  config: Config,
  liveSeconds: number,
  pass: (recoverAs: (uuid: string) => 'paused' | 'failed') => Promise<PassResult>,
): Promise<FleetPassResult> {
  const byTask = new Map((await openJobs(pool, liveSeconds)).map((j) => [j.task_uuid, j]))
  const recoverAs = (uuid: string): 'paused' | 'failed' => {
    const job = byTask.get(uuid)
    return job !== undefined && config.fleet.recovery === 'resume' && job.died + 1 < config.fleet.max_attempts ? 'paused' : 'failed'
  }
  const result = await pass(recoverAs)
  await pauseAtForTest('reap:after-move')
  const reaped = new Set(result.findings.filter((f) => f.action === 'reaped').map((f) => f.uuid))
  const settled: FleetPassResult['settled'] = []
  // Read again: a job its worker settled during the pass is not settled twice.
  for (const job of await openJobs(pool, liveSeconds)) {
    const location = locateTask(layout, job.task_uuid)?.location ?? null
    // Its agent still owns it (or a watch-locks pass will reap it), or a live worker is still starting it.
    if (location === 'running' || (location === null && job.worker_live)) continue
    // In paused/ under a live worker, by design: its agent is starting (a resume's task is in paused/ until
    // it takes it), or has just paused for a usage limit or a budget and its worker is ending the job as a
    // wait. That worker settles it; settled here, it was recorded `stopped` and its resume queued at once.
    // A task the reaper paused is not such a pause, also when the pass that reaped it was killed before it settled the job.
    if (location === 'paused' && job.worker_live && !reaped.has(job.task_uuid) && !reapedBefore(layout, job)) continue
    const end = await settleJob(pool, layout, job, location, reaped.has(job.task_uuid), config.fleet)
    if (end !== null) settled.push({ job: job.id, task: job.task_uuid, ...end })
  }
  // The claims' and ends' logs into the fleet's totals, also when no one reads /metrics (docs/formats.md#fleet-tallies).
  await rollUpTallies(pool)
  return { result, settled }
}

async function openJobs(pool: Pool, liveSeconds: number): Promise<OpenJob[]> {
  const result = await pool.query<Record<string, unknown>>(
    `SELECT j.id, j.task_uuid, j.kind, j.spec, j.priority, j.attempts, j.claimed_at,
            (w.id IS NOT NULL AND ${liveWorkerSql('w', '$1')}) AS worker_live,
            (SELECT count(*) FROM fleet_jobs d WHERE d.task_uuid = j.task_uuid AND d.outcome = 'died') AS died
     FROM fleet_jobs j LEFT JOIN fleet_workers w ON w.id = j.claimed_by
     WHERE j.state = 'running'`,
    [liveSeconds],
  )
  return result.rows.map((r) => ({
    id: Number(r.id),
    task_uuid: String(r.task_uuid),
    kind: String(r.kind),
    spec: r.spec,
    priority: Number(r.priority),
    attempts: Number(r.attempts),
    claimed_at: r.claimed_at instanceof Date ? r.claimed_at : null,
    worker_live: r.worker_live === true,
    died: Number(r.died),
  }))
}

/** Ends a job from what its task became (it is not in running/); null when the job was settled meanwhile. */
async function settleJob(
  pool: Pool,
  layout: Layout,
  job: OpenJob,
  location: Location | null,
  reaped: boolean,
  fleet: Config['fleet'],
): Promise<{ outcome: string; resumed: boolean } | null> {
  const maxAttempts = fleet.max_attempts
  return inTransaction(pool, async (client) => {
    if (location === null) {
      // Its process died before it created the task: the job waits again, while attempts remain.
      if (await requeueNotBegun(client, job.id, maxAttempts)) return { outcome: 'waiting again', resumed: false }
      const ended = await endJob(client, job.id, {
        outcome: 'failed',
        failed: true,
        error: `its agent died before the task was created (attempt ${job.attempts} of fleet.max_attempts ${maxAttempts})`,
      })
      return ended === null ? null : { outcome: 'failed', resumed: false }
    }
    let end: JobEnd
    if (location === 'paused') {
      const state = safeState(layout.taskDir('paused', job.task_uuid))
      const by = pausedBy(state, job)
      // Reaped by this pass, or by one that died before it settled the job: its resume is queued.
      const died = reaped || by === 'reaper'
      const limited = died || by === null ? null : limitedEnd(state, fleet.retry)
      if (died) end = { outcome: 'died', resume: true, error: state?.error ?? null }
      // Paused until a usage limit lifts or a budget window resets: its job waits until then, as a live worker's would.
      else if (limited !== null) end = limited
      else if (by === 'llm' && llmOutage(state)) end = { outcome: 'paused', retry: fleet.retry, error: state?.error ?? null }
      // Paused by a signal (its worker stopped) it goes on, as a live worker would have queued it; paused on
      // purpose (an operator, a failing LLM, a full disk) it waits for whoever paused it. Not known: while attempts remain.
      else
        end = { outcome: 'paused', resume: by === null ? job.died + 1 < maxAttempts : by === 'signal', error: by === 'signal' ? null : (state?.error ?? null) }
    } else {
      const state = safeState(layout.taskDir('completed', job.task_uuid))
      const { outcome, error: recorded } = completedEnd(state, 'completed')
      let error = recorded
      // Its last allowed attempt died: the job says which it was (fleet --json counts the others as 'died').
      if (reaped && outcome === 'failed' && fleet.recovery === 'resume')
        error = `${error ?? 'agent died'} (attempt ${job.died + 1} of fleet.max_attempts ${maxAttempts})`
      end = { outcome, error }
    }
    const ended = await endJob(client, job.id, end)
    return ended === null ? null : { outcome: ended.state === 'retrying' ? 'retrying' : end.outcome, resumed: ended.resumed }
  })
}

/** Paused by the reaper in this job's run (state.json says so, written after the claim): a pass that died left it so. */
function reapedBefore(layout: Layout, job: OpenJob): boolean {
  return pausedBy(safeState(layout.taskDir('paused', job.task_uuid)), job) === 'reaper'
}

/**
 * Who paused the task in this job's run: state.json's paused_by, trusted only when state.json was written
 * after the job's claim (else an earlier run paused it, and this job's agent never took it). Null when unknown.
 * (updated_at is the agent host's clock, claimed_at the database's: skew between them can make a pause right
 * after the claim look older, which only falls back to the rule for an unknown pause.)
 */
function pausedBy(state: TaskState | null, job: OpenJob): PausedBy | null {
  const by = state?.paused_by ?? null
  if (by === null || job.claimed_at === null) return null
  const written = Date.parse(state?.updated_at ?? '')
  return !Number.isNaN(written) && written >= job.claimed_at.getTime() ? by : null
}
