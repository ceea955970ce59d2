import { randomUUID } from 'node:crypto'
import pg from 'pg'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { JobQueue } from '../../src/fleet/queue/job-queue.js'
import type { Job } from '../../src/fleet/queue/job.js'
import { registerWorker } from '../../src/fleet/worker/registry.js'
import { usePostgres } from '../helpers/use-postgres.js'

/** docs/contract.md §14.3: a worker acts on a job only in the claim it holds. */
const database = usePostgres({ schema: true, truncate: ['fleet_jobs', 'fleet_workers'] })
let pool: pg.Pool
beforeAll(() => {
  pool = new pg.Pool({ connectionString: database.server.url, max: 2 })
})
afterAll(async () => {
  await pool?.end()
})

const row = async (id: number) =>
  (
    await database.query<{ state: string; attempts: number; claimed_by: string | null; error: string | null }>(
      'SELECT state, attempts, claimed_by, error FROM fleet_jobs WHERE id = $1',
      [id],
    )
  )[0]

/** A job claimed once by the worker, handed back by a pass (as while the worker was frozen), and claimed by it again. */
async function claimedTwice(): Promise<{ queue: JobQueue; worker: string; first: Job; second: Job }> {
  const queue = new JobQueue(pool)
  const worker = (await registerWorker(pool, 'claims-test', 2, 60)).id
  await queue.enqueue({ task_uuid: randomUUID(), kind: 'new', spec: { task: 't' } })
  const first = (await queue.claim(worker)) as Job
  await database.query(`UPDATE fleet_jobs SET state = 'waiting', claimed_by = NULL, claimed_at = NULL WHERE id = $1`, [first.id])
  const second = (await queue.claim(worker)) as Job
  expect(second).toMatchObject({ id: first.id, attempts: first.attempts + 1 })
  return { queue, worker, first, second }
}

describe('a job claimed again by the same worker', () => {
  it("is not retried, ended or released by what the first claim's child did", async () => {
    const { queue, worker, first, second } = await claimedTwice()
    // The first claim's child, killed before its task began, is reported late: the second claim stays as it is.
    expect(
      await queue.retry(first, worker, 8, {
        outcome: 'failed',
        error: 'its agent was killed (SIGKILL) before the task began (attempt 1 of fleet.max_attempts 8)',
        reason: 'killed',
      }),
    ).toBe('gone')
    expect(await row(first.id)).toEqual({ state: 'running', attempts: 2, claimed_by: worker, error: null })
    expect(await queue.finish(first, worker, { outcome: 'failed', failed: true, error: 'late' })).toBeNull()
    await queue.release(first, worker)
    expect(await row(first.id)).toEqual({ state: 'running', attempts: 2, claimed_by: worker, error: null })
    // The claim it holds is its to end.
    expect(await queue.finish(second, worker, { outcome: 'completed', error: null })).toMatchObject({ state: 'done' })
    expect(await row(first.id)).toMatchObject({ state: 'done', attempts: 2, error: null })
  })

  it('hands back, or fails after its last attempt, the claim it holds', async () => {
    const { queue, worker, second } = await claimedTwice()
    expect(await queue.retry(second, worker, 8, { outcome: 'failed', error: 'killed', reason: 'killed' })).toBe('waiting')
    expect(await row(second.id)).toMatchObject({ state: 'waiting', claimed_by: null })
    const third = (await queue.claim(worker)) as Job
    expect(await queue.retry(third, worker, 3, { outcome: 'failed', error: 'killed', reason: 'killed' })).toBe('ended')
    expect(await row(third.id)).toMatchObject({ state: 'failed', attempts: 3, error: 'killed' })
  })
})
