import { describe, expect, it } from 'vitest'
import { jobAttempts } from '../../src/fleet/queue/job-history.js'
import type { JobQueue } from '../../src/fleet/queue/job-queue.js'
import type { RetryPolicy } from '../../src/fleet/queue/retry-policy.js'
import { settle, taskSnapshot } from '../../src/fleet/queue/task-outcome.js'
import { fleetCounterTotals } from '../../src/storage/index/fleet-counters.js'
import { makeTree, uuidN } from '../fixtures/tree.js'
import { queueOn } from '../helpers/fleet-jobs.js'
import { usePostgres } from '../helpers/use-postgres.js'

/**
 * The worker's settle logic for pauses that end by themselves (docs/fleet-operations.md#waits),
 * on real PostgreSQL: the task's state.json written as `run` writes it when a budget or a
 * usage limit pauses it, the job claimed and ended as a worker does (settle, then finish).
 * The clock is the database's: a wait ends when the test moves the row's next_run_at.
 */
const database = usePostgres({ schema: true, truncate: ['fleet_jobs', 'fleet_workers', 'fleet_job_attempts', 'fleet_counters', 'fleet_counter_log'] })
const RETRY: RetryPolicy = { base_seconds: 30, max_seconds: 1800, max_attempts: 8, max_wait_hours: 24 }
const WORKER = 'host-a:1234:test'
const alive = { stopped: false, lastLine: '' }

/** A job for `uuid`, claimed by this test's "worker". */
async function claimed(queue: JobQueue, uuid: string, user = 'alice') {
  await queue.enqueue({ task_uuid: uuid, kind: 'resume', spec: {}, user })
  const job = await queue.claim(WORKER)
  expect(job?.task_uuid).toBe(uuid)
  return job as NonNullable<typeof job>
}

const row = async (uuid: string) =>
  (
    await database.query<{
      id: number
      state: string
      wait_reason: string | null
      wait_cap: string | null
      limit_waits: number
      next_run_at: Date | null
      error: string | null
      outcome: string | null
    }>('SELECT id::int, state, wait_reason, wait_cap, limit_waits, next_run_at, error, outcome FROM fleet_jobs WHERE task_uuid = $1', [uuid])
  )[0]

describe('a job whose task a budget paused', () => {
  it('with a window that resets (user-daily): the job waits until the reset, not claimable before, no attempt spent; it runs once the time comes', async () => {
    const queue = queueOn(database)
    const tree = makeTree()
    const uuid = uuidN(1)
    const reset = new Date(Date.now() + 6 * 3_600_000).toISOString()
    const job = await claimed(queue, uuid)
    tree.write({
      uuid,
      location: 'paused',
      status: 'paused',
      state: { paused_by: 'budget', budget_cap: 'user-daily', resume_at: reset, error: 'budgets.user_daily_usd 5 would be passed' },
    })
    const end = settle({ task: taskSnapshot(tree.layout, job.task_uuid, null), code: 5, child: alive, retry: RETRY })
    expect(end).toMatchObject({ outcome: 'paused', wait: { reason: 'budget', cap: 'user-daily', until: reset, maxWaitSeconds: null } })
    const ended = await queue.finish(job, WORKER, end ?? { outcome: '?' })
    expect(ended).toMatchObject({ state: 'retrying', wait: 'budget' })
    expect(await row(uuid)).toMatchObject({ state: 'retrying', wait_reason: 'budget', wait_cap: 'user-daily', limit_waits: 1 })
    expect((await row(uuid))?.next_run_at?.toISOString()).toBe(reset)
    // Not before the reset: no worker gets it.
    expect(await queue.claim(WORKER)).toBeNull()
    const history = await jobAttempts(queue.pool, job.id)
    expect(history).toEqual([
      expect.objectContaining({ attempt: 1, reason: 'budget', cap: 'user-daily', wait_until: reset, again: true, host: 'host-a', worker: WORKER }),
    ])
    // The window resets (the test's clock: the row's time), and the job runs.
    await database.query('UPDATE fleet_jobs SET next_run_at = now() WHERE id = $1', [job.id])
    const again = await queue.claim(WORKER)
    expect(again).toMatchObject({ id: job.id, attempts: 2, kind: 'resume' })
  })

  it('by its own cap (no reset): the job ends with its task paused, its history naming the cap; it is not run again by itself', async () => {
    const queue = queueOn(database)
    const tree = makeTree()
    const uuid = uuidN(2)
    const job = await claimed(queue, uuid)
    tree.write({
      uuid,
      location: 'paused',
      status: 'paused',
      state: { paused_by: 'budget', budget_cap: 'task', resume_at: null, error: 'run.max_cost_usd 2 would be passed' },
    })
    const end = settle({ task: taskSnapshot(tree.layout, job.task_uuid, null), code: 5, child: alive, retry: RETRY })
    expect(end).toMatchObject({ outcome: 'paused', reason: 'budget', cap: 'task' })
    expect(await queue.finish(job, WORKER, end ?? { outcome: '?' })).toMatchObject({ state: 'done', resumed: false })
    expect((await jobAttempts(queue.pool, job.id)).map((a) => [a.reason, a.cap, a.again])).toEqual([['budget', 'task', false]])
  })
})

describe('a usage limit past fleet.retry.max_wait_hours', () => {
  it('fails the job (its task stays paused, resumable), saying why', async () => {
    const queue = queueOn(database)
    const tree = makeTree()
    const uuid = uuidN(3)
    const job = await claimed(queue, uuid)
    tree.write({
      uuid,
      location: 'paused',
      status: 'paused',
      state: { paused_by: 'rate-limit', resume_at: new Date(Date.now() + 30 * 3_600_000).toISOString(), error: '429 usage limit' },
    })
    const end = settle({ task: taskSnapshot(tree.layout, job.task_uuid, null), code: 1, child: alive, retry: RETRY })
    expect(end?.wait).toMatchObject({ reason: 'rate-limit', maxWaitSeconds: 24 * 3600 })
    expect(await queue.finish(job, WORKER, end ?? { outcome: '?' })).toMatchObject({ state: 'failed' })
    expect((await row(uuid))?.error).toMatch(/^429 usage limit; it lifts at \S+, past fleet\.retry\.max_wait_hours \(24 h of waiting in all; 0 h so far\)$/)
  })

  it('a short one waits, and the waits add up to the cap', async () => {
    const queue = queueOn(database)
    const tree = makeTree()
    const uuid = uuidN(4)
    const policy = { ...RETRY, max_wait_hours: 3 }
    let job = await claimed(queue, uuid)
    const pauseFor = (hours: number) =>
      tree.write({
        uuid,
        location: 'paused',
        status: 'paused',
        state: { paused_by: 'rate-limit', resume_at: new Date(Date.now() + hours * 3_600_000).toISOString(), error: '429' },
      })
    pauseFor(2)
    expect(
      await queue.finish(
        job,
        WORKER,
        settle({ task: taskSnapshot(tree.layout, job.task_uuid, null), code: 1, child: alive, retry: policy }) ?? { outcome: '?' },
      ),
    ).toMatchObject({
      state: 'retrying',
      wait: 'rate-limit',
    })
    await database.query('UPDATE fleet_jobs SET next_run_at = now() WHERE id = $1', [job.id])
    job = (await queue.claim(WORKER)) as typeof job
    pauseFor(2)
    // 2 h waited, 2 more would pass the 3 h cap.
    expect(
      await queue.finish(
        job,
        WORKER,
        settle({ task: taskSnapshot(tree.layout, job.task_uuid, null), code: 1, child: alive, retry: policy }) ?? { outcome: '?' },
      ),
    ).toMatchObject({ state: 'failed' })
    expect((await fleetCounterTotals(queue.pool))?.retries['rate-limit']).toBe(1)
  })
})

describe("/metrics' counters of the history", () => {
  it('counts the attempts that ran again by reason, and budget pauses by cap', async () => {
    const queue = queueOn(database)
    const tree = makeTree()
    for (const [n, cap, resumeAt] of [
      [5, 'user-daily', new Date(Date.now() + 3_600_000).toISOString()],
      [6, 'task', null],
    ] as const) {
      const uuid = uuidN(n)
      // Two users: one's spent daily cap does not hold the other's job.
      const job = await claimed(queue, uuid, cap === 'task' ? 'bob' : 'alice')
      tree.write({ uuid, location: 'paused', status: 'paused', state: { paused_by: 'budget', budget_cap: cap, resume_at: resumeAt } })
      await queue.finish(job, WORKER, settle({ task: taskSnapshot(tree.layout, job.task_uuid, null), code: 5, child: alive, retry: RETRY }) ?? { outcome: '?' })
    }
    expect(await fleetCounterTotals(queue.pool)).toMatchObject({ retries: { budget: 1 }, budget_pauses: { 'user-daily': 1, task: 1 } })
  })
})

describe('a user whose cost cap is spent', () => {
  it('their other jobs are not claimed until the window resets (no slot taken); other users’ jobs run; fleet-daily holds everyone', async () => {
    const queue = queueOn(database)
    const tree = makeTree()
    const uuid = uuidN(7)
    const job = await claimed(queue, uuid)
    tree.write({
      uuid,
      location: 'paused',
      status: 'paused',
      state: { paused_by: 'budget', budget_cap: 'user-daily', resume_at: new Date(Date.now() + 3_600_000).toISOString() },
    })
    await queue.finish(job, WORKER, settle({ task: taskSnapshot(tree.layout, job.task_uuid, null), code: 5, child: alive, retry: RETRY }) ?? { outcome: '?' })
    await queue.enqueue({ task_uuid: uuidN(8), kind: 'new', spec: { task: 'x' }, user: 'alice' })
    await queue.enqueue({ task_uuid: uuidN(9), kind: 'new', spec: { task: 'y' }, user: 'bob' })
    expect((await queue.claim(WORKER))?.task_uuid).toBe(uuidN(9))
    expect(await queue.claim(WORKER)).toBeNull()
    // Her other job was made to wait for the same window, until the same time: it says why (this worker has no caps configured).
    const window = await row(uuid)
    expect(await row(uuidN(8))).toMatchObject({ state: 'retrying', wait_reason: 'budget', wait_cap: 'user-daily', next_run_at: window?.next_run_at })
    // The window resets (the rows' time): alice's jobs run again.
    await database.query(`UPDATE fleet_jobs SET next_run_at = now() WHERE wait_reason = 'budget' AND wait_cap = 'user-daily'`)
    const next = [await queue.claim(WORKER), await queue.claim(WORKER)].map((j) => j?.task_uuid).sort()
    expect(next).toEqual([uuidN(7), uuidN(8)].sort())
    // fleet-daily: nobody's job is claimed while it holds.
    await database.query(
      `UPDATE fleet_jobs SET state = 'retrying', wait_reason = 'budget', wait_cap = 'fleet-daily', next_run_at = now() + interval '1 hour' WHERE task_uuid = $1`,
      [uuidN(7)],
    )
    await queue.enqueue({ task_uuid: uuidN(10), kind: 'new', spec: { task: 'z' }, user: 'carol' })
    expect(await queue.claim(WORKER)).toBeNull()
  })
})
