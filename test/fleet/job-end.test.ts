import pg from 'pg'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { cancelJob } from '../../src/fleet/queue/job-admin.js'
import { endJob } from '../../src/fleet/queue/job-end.js'
import { JobQueue } from '../../src/fleet/queue/job-queue.js'
import type { Job, JobEnd } from '../../src/fleet/queue/job.js'
import { registerWorker } from '../../src/fleet/worker/registry.js'
import { fleetCounterTotals } from '../../src/storage/index/fleet-counters.js'
import { inTransaction } from '../../src/storage/index/pg-pool.js'
import { uuidN } from '../fixtures/tree.js'
import { usePostgres } from '../helpers/use-postgres.js'

/**
 * A job's plain end (done or failed, no wait, no retry) is one call of the database's fleet_end
 * (storage/index/fleet-claim.ts): it must leave what endJob's transaction leaves, the job's row,
 * its history and its resume, and count the same. On real PostgreSQL, each end made both ways.
 */
const database = usePostgres({ schema: true, truncate: ['fleet_jobs', 'fleet_job_attempts', 'fleet_workers', 'fleet_counters', 'fleet_counter_log'] })
let pool: pg.Pool
beforeAll(() => {
  pool = new pg.Pool({ connectionString: database.server.url, max: 2 })
})
afterAll(async () => {
  await pool?.end()
})

/** What an end left: the job (its new state, outcome and error), its history's rows, the resume queued for its task. */
async function leftBy(taskN: number): Promise<unknown> {
  const task = uuidN(taskN)
  const jobs = await database.query<Record<string, unknown>>(
    `SELECT kind, state, outcome, error, attempts, "user", spec, priority, claimed_by IS NOT NULL AS claimed, finished_at IS NOT NULL AS finished, wait_reason
     FROM fleet_jobs WHERE task_uuid = $1 ORDER BY id`,
    [task],
  )
  const history = await database.query<Record<string, unknown>>(
    `SELECT a.attempt, a.worker_id IS NOT NULL AS worker, a.hostname, a.started_at = j.claimed_at AS started, a.outcome, a.reason, a.cap, a.error, a.wait_until, a.again
     FROM fleet_job_attempts a JOIN fleet_jobs j ON j.id = a.job_id WHERE j.task_uuid = $1 ORDER BY a.id`,
    [task],
  )
  return { jobs, history }
}

/** A job of task `taskN` queued and claimed; `priority` above the resumes queued before, so that the claim takes this one. */
async function claimedJob(queue: JobQueue, worker: string, taskN: number, priority = 3): Promise<Job> {
  await queue.enqueue({ task_uuid: uuidN(taskN), kind: 'new', spec: { task: 'the same job', user: 'ann' }, user: 'ann', priority })
  const job = await queue.claim(worker)
  expect(job?.task_uuid).toBe(uuidN(taskN))
  return job as Job
}

const ENDS: JobEnd[] = [
  { outcome: 'completed' },
  { outcome: 'undelivered', error: 'the push was refused' },
  { outcome: 'failed', failed: true, error: 'x'.repeat(3000) },
  { outcome: 'paused', resume: true, error: null },
  { outcome: 'died', resume: true, reason: 'died' },
  { outcome: 'paused', error: 'a budget of its own', reason: 'budget', cap: 'task' },
  { outcome: 'failed', failed: true, resume: true },
]

describe('a plain end in one call', () => {
  it('leaves the job, its history and its resume as the transaction does, and counts the same', async () => {
    const queue = new JobQueue(pool)
    const worker = (await registerWorker(pool, 'end-test', 2, 60)).id
    for (const [i, end] of ENDS.entries()) {
      const once = await claimedJob(queue, worker, 2 * i + 1, 10 + i)
      const inTx = await claimedJob(queue, worker, 2 * i + 2, 10 + i)
      const quick = await queue.finish(once, worker, end)
      const slow = await inTransaction(pool, (client) => endJob(client, inTx.id, end, { workerId: worker, attempts: inTx.attempts }))
      expect(quick, JSON.stringify(end)).toEqual(slow)
      expect(await leftBy(2 * i + 1), JSON.stringify(end)).toEqual(await leftBy(2 * i + 2))
    }
    // Each end counted once, both ways alike: two of each outcome.
    const counts = await fleetCounterTotals(pool)
    expect(counts?.claims).toEqual({ 'end-test': 2 * ENDS.length })
    expect(counts?.finished).toEqual({ completed: 2, undelivered: 2, failed: 4, paused: 4, died: 2 })
  })

  it('leaves a job whose cancel was asked, or that is no longer in this claim, to the transaction, which says so', async () => {
    const queue = new JobQueue(pool)
    const worker = (await registerWorker(pool, 'end-test', 2, 60)).id
    const cancelled = await claimedJob(queue, worker, 31)
    await cancelJob(pool, cancelled.id)
    expect(await queue.finish(cancelled, worker, { outcome: 'completed' })).toMatchObject({ state: 'cancelled' })
    expect(await leftBy(31)).toMatchObject({ jobs: [{ state: 'cancelled', outcome: 'completed' }], history: [{ reason: 'cancelled', again: false }] })
    const gone = await claimedJob(queue, worker, 32)
    expect(await queue.finish({ ...gone, attempts: gone.attempts + 1 }, worker, { outcome: 'completed' })).toBeNull()
    expect(await queue.finish(gone, 'another:1:worker', { outcome: 'completed' })).toBeNull()
    expect(await leftBy(32)).toMatchObject({ jobs: [{ state: 'running' }], history: [] })
  })
})
