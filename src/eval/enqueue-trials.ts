import { randomUUID } from 'node:crypto'
import type { Pool } from 'pg'
import { insertJob } from '../fleet/queue/job-row.js'
import type { JobState } from '../fleet/queue/job.js'
import type { Trial } from './report.js'
import { readTrials, trialKey } from './store.js'
import type { EvalSpec } from './store.js'

/**
 * An eval's trials as fleet jobs (docs/eval.md#in-the-fleet): one job per trial (task ×
 * variant × run), its idempotency key naming the trial, so that the key is the record of
 * what was queued: a trial with a job (in any state) is never queued again, and one
 * recorded in trials.jsonl never runs again.
 */

interface TrialRef {
  task: string
  variant: string
  run: number
}

/** The job's key of one trial of eval `id`. */
export function trialJobKey(id: string, t: TrialRef): string {
  return `eval:${id}:${t.variant}:${t.task}:${t.run}`
}

/** Every trial the eval asks for. */
export function allTrials(spec: EvalSpec): TrialRef[] {
  return spec.variants.flatMap((v) => spec.tasks.flatMap((task) => Array.from({ length: spec.runs }, (_, i) => ({ task, variant: v.name, run: i + 1 }))))
}

/** Where the job of a trial is: the latest job of its task (a stopped task's resume is a job of its own), its state and last error. */
export interface TrialJob {
  job: number
  task_uuid: string
  state: JobState
  error: string | null
}

/** The jobs of eval `id`'s trials, by trialKey. */
export async function trialJobs(pool: Pool, id: string): Promise<Map<string, TrialJob>> {
  const rows = await pool.query<{ key: string; id: string; task_uuid: string; state: JobState; error: string | null }>(
    `SELECT k.idempotency_key AS key, j.id, j.task_uuid, j.state, j.error FROM fleet_jobs k
     CROSS JOIN LATERAL (SELECT id, task_uuid, state, error FROM fleet_jobs WHERE task_uuid = k.task_uuid ORDER BY id DESC LIMIT 1) j
     WHERE k.idempotency_key LIKE $1 ORDER BY k.id`,
    [`eval:${id}:%`],
  )
  const byKey = new Map<string, TrialJob>()
  for (const row of rows.rows) {
    const [, , variant, task, run] = row.key.split(':')
    if (variant === undefined || task === undefined || run === undefined) continue
    byKey.set(trialKey({ variant, task, run: Number(run) }), { job: Number(row.id), task_uuid: row.task_uuid, state: row.state, error: row.error })
  }
  return byKey
}

/**
 * Queues a job for each trial neither recorded nor queued already; the number queued. Two
 * commands at once cannot both queue one trial: a key held by an open job queues nothing
 * (the unique index), and a finished one was read before.
 */
export async function enqueueTrials(pool: Pool, spec: EvalSpec, dir: string, user: string | null, priority: number): Promise<number> {
  const { trials } = await readTrials(dir)
  const recorded = new Set(trials.map(trialKey))
  const queued = await trialJobs(pool, spec.id)
  let count = 0
  for (const t of allTrials(spec)) {
    if (recorded.has(trialKey(t)) || queued.has(trialKey(t))) continue
    const id = await insertJob(pool, {
      task_uuid: randomUUID(),
      kind: 'new',
      spec: { eval: { id: spec.id, task: t.task, variant: t.variant, run: t.run }, ...(user === null ? {} : { user }) },
      priority,
      user,
      key: trialJobKey(spec.id, t),
    })
    if (id !== null) count++
  }
  return count
}

/** How the trials stand: those still to end (their jobs open), and a trial for each whose job ended without a verdict (failed, cancelled, or done unjudged). */
export interface TrialsStanding {
  open: number
  unjudged: Trial[]
}

export async function standing(pool: Pool, spec: EvalSpec, dir: string): Promise<TrialsStanding> {
  const { trials } = await readTrials(dir)
  const recorded = new Set(trials.map(trialKey))
  const jobs = await trialJobs(pool, spec.id)
  let open = 0
  const unjudged: Trial[] = []
  for (const t of allTrials(spec)) {
    const job = jobs.get(trialKey(t))
    if (recorded.has(trialKey(t)) || job === undefined) continue
    if (job.state === 'waiting' || job.state === 'running' || job.state === 'retrying') open++
    else
      unjudged.push({
        ...t,
        passed: false,
        // A job that ended without a verdict: `jobs retry` runs it again, and the same command then collects it.
        status: job.state === 'done' ? 'no_verdict' : `job_${job.state}`,
        uuid: job.task_uuid,
        usd: 0,
        tokens: 0,
        turns: 0,
        duration_ms: 0,
        check: job.error === null ? null : { exit_code: null, tail: `job ${job.job}: ${job.error}`.slice(0, 2000) },
        finished_at: '',
      })
  }
  return { open, unjudged }
}
