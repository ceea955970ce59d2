import { describe, expect, it } from 'vitest'
import { CLI } from '../../src/actions/actor.js'
import { enqueueJob } from '../../src/actions/enqueue.js'
import type { JobRequest } from '../../src/actions/enqueue.js'
import { cancelJobAction, retryJobAction } from '../../src/actions/jobs.js'
import { createCommandEnv } from '../../src/command-env.js'
import type { CommandEnv } from '../../src/command-env.js'
import { makeTree, uuidN } from '../fixtures/tree.js'
import { usePostgres } from '../helpers/use-postgres.js'

// enqueue, jobs cancel and jobs retry as the CLI and the page take them, on a real PostgreSQL;
// no worker runs, so no job is claimed here (test/fleet/ drives running jobs).
const database = usePostgres({ truncate: ['fleet_jobs', 'fleet_job_attempts'] })

async function fleetEnv(): Promise<CommandEnv> {
  const tree = makeTree()
  return await createCommandEnv({ home: tree.base, config: 'none' }, { ...database.env(), CTXAGENT_NOW: '2024-06-01T00:00:00Z' })
}

const request = (n: number, key: string | null = null): JobRequest => ({ uuid: uuidN(n), kind: 'new', spec: { task: 'fix it' }, priority: 0, user: 'ana', key })

describe('enqueueJob', () => {
  it('queues a job; a second open job for the task is a conflict (exit 4); the same key again is held by the first', async () => {
    const ctx = await fleetEnv()
    const first = await enqueueJob(ctx, request(1), CLI)
    expect(first).toMatchObject({ kind: 'queued', uuid: uuidN(1) })
    await expect(enqueueJob(ctx, request(1), CLI)).rejects.toMatchObject({
      exitCode: 4,
      message: `task ${uuidN(1)} already has a job waiting, running or retrying`,
    })

    const keyed = await enqueueJob(ctx, request(2, 'k-2'), CLI)
    expect(keyed.kind).toBe('queued')
    const again = await enqueueJob(ctx, request(3, 'k-2'), { via: 'serve', operator: 'gina' })
    expect(again).toEqual({ kind: 'held', uuid: uuidN(2), job: keyed.job, state: 'waiting', key: 'k-2', finished_at: null })
    const rows = await database.query<{ task_uuid: string; state: string }>('SELECT task_uuid, state FROM fleet_jobs ORDER BY id')
    expect(rows).toEqual([
      { task_uuid: uuidN(1), state: 'waiting' },
      { task_uuid: uuidN(2), state: 'waiting' },
    ])
  })
})

describe('cancelJobAction and retryJobAction', () => {
  it('cancel a waiting job at once (its task not started); retry makes it wait again as it was', async () => {
    const ctx = await fleetEnv()
    const queued = await enqueueJob(ctx, request(4), CLI)
    const cancelled = await cancelJobAction(ctx, queued.job, CLI, 1_000)
    expect(cancelled).toEqual({ job: queued.job, task_uuid: uuidN(4), was: 'waiting', task: 'not_started', state: 'cancelled' })
    expect(await database.query('SELECT state FROM fleet_jobs WHERE id = $1', [queued.job])).toEqual([{ state: 'cancelled' }])

    const retried = await retryJobAction(ctx, queued.job, { via: 'serve', operator: 'gina' })
    expect(retried).toEqual({ job: queued.job, task_uuid: uuidN(4), kind: 'new', was: 'cancelled' })
    expect(await database.query('SELECT state FROM fleet_jobs WHERE id = $1', [queued.job])).toEqual([{ state: 'waiting' }])
  })

  it('refuse a job that does not exist, changing nothing', async () => {
    const ctx = await fleetEnv()
    await expect(cancelJobAction(ctx, 999_999, CLI, 1_000)).rejects.toThrow(/999999/)
    await expect(retryJobAction(ctx, 999_999, CLI)).rejects.toThrow(/999999/)
    expect(await database.query('SELECT id FROM fleet_jobs')).toEqual([])
  })
})
