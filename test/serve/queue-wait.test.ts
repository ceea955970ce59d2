import pg from 'pg'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { JobQueue } from '../../src/fleet/queue/job-queue.js'
import type { Job } from '../../src/fleet/queue/job.js'
import { expireRows } from '../../src/operations/retention.js'
import { makeTree, uuidN } from '../fixtures/tree.js'
import { usePostgres } from '../helpers/use-postgres.js'
import { startServe } from './helpers.js'
import type { Serve } from './helpers.js'
import { parseExposition } from './exposition.js'

const database = usePostgres({ schema: true })
let pool: pg.Pool
beforeAll(() => {
  pool = new pg.Pool({ connectionString: database.server.url, max: 2 })
})
afterAll(async () => {
  await pool?.end()
})

const NAME = 'ctxagent_queue_wait_seconds'

/** The histogram as one scrape of /metrics gives it: buckets by their bound (in exposition order), sum, count. */
async function histogram(s: Serve): Promise<{ buckets: [string, number][]; sum: number; count: number }> {
  const res = await s.get('/metrics')
  expect(res.status).toBe(200)
  const family = parseExposition(await res.text()).get(NAME)
  expect(family?.type).toBe('histogram')
  const samples = family?.samples ?? []
  const one = (name: string) => samples.find((x) => x.name === name)?.value ?? Number.NaN
  const buckets = samples.filter((x) => x.name === `${NAME}_bucket`).map((x): [string, number] => [x.labels.le as string, x.value])
  // Cumulative: each bucket holds the ones before it, +Inf (the last) is the count.
  for (let i = 1; i < buckets.length; i++) expect((buckets[i] as [string, number])[1]).toBeGreaterThanOrEqual((buckets[i - 1] as [string, number])[1])
  expect(buckets.at(-1)).toEqual(['+Inf', one(`${NAME}_count`)])
  return { buckets, sum: one(`${NAME}_sum`), count: one(`${NAME}_count`) }
}

const bucket = (h: { buckets: [string, number][] }, le: string) => h.buckets.find(([b]) => b === le)?.[1]

describe('ctxagent_queue_wait_seconds', () => {
  it("observes each claim's wait once, from when its job could be claimed; count, sum and buckets never fall (not when claimed jobs leave the queue, not when cleanup expires them)", async () => {
    const s = await startServe(makeTree().base, { env: database.env() })
    const queue = new JobQueue(pool)
    const none = await histogram(s)
    expect(none.count).toBe(0)
    expect(none.sum).toBe(0)
    expect(none.buckets.map(([le]) => le)).toEqual(['1', '5', '15', '60', '300', '900', '1800', '3600', '14400', '+Inf'])

    // Three jobs made to have waited 100 s, 2 h, and (retrying) 30 s since their retry came due: the test sets when they could be claimed.
    const ids: number[] = []
    for (let i = 1; i <= 3; i++) ids.push((await queue.enqueue({ task_uuid: uuidN(i), kind: 'new', spec: { task: `t${i}` } })) as number)
    // Queued: claimable from then (the trigger set it).
    expect(await database.query('SELECT count(*)::int AS n FROM fleet_jobs WHERE ready_at IS NULL')).toEqual([{ n: 0 }])
    await database.query(`UPDATE fleet_jobs SET ready_at = now() - interval '100 seconds' WHERE id = $1`, [ids[0]])
    await database.query(`UPDATE fleet_jobs SET ready_at = now() - interval '2 hours' WHERE id = $1`, [ids[1]])
    // Retrying: claimable once next_run_at passed, whenever it began to retry.
    await database.query(`UPDATE fleet_jobs SET state = 'retrying', next_run_at = now() - interval '30 seconds' WHERE id = $1`, [ids[2]])

    const claimed: Job[] = []
    let before = none
    for (let i = 0; i < 3; i++) {
      claimed.push((await queue.claim('queue-wait-test')) as Job)
      const after = await histogram(s)
      expect(after.count).toBe(before.count + 1)
      expect(after.sum).toBeGreaterThan(before.sum)
      before = after
    }
    expect(claimed.map((j) => j.id).sort()).toEqual([...ids].sort())
    // A claim that finds nothing observes nothing.
    expect(await queue.claim('queue-wait-test')).toBeNull()
    // Under a per-user limit the claim is its own transaction: observed the same.
    const alice = (await queue.enqueue({ task_uuid: uuidN(4), kind: 'new', spec: { task: 't4' }, user: 'alice' })) as number
    await database.query(`UPDATE fleet_jobs SET ready_at = now() - interval '10 seconds' WHERE id = $1`, [alice])
    expect((await queue.claim('queue-wait-test', 1))?.id).toBe(alice)
    const all = await histogram(s)
    expect(all.count).toBe(4)
    expect(bucket(all, '5')).toBe(0)
    expect(bucket(all, '15')).toBe(1)
    expect(bucket(all, '60')).toBe(2)
    expect(bucket(all, '300')).toBe(3)
    expect(bucket(all, '3600')).toBe(3)
    expect(bucket(all, '14400')).toBe(4)
    expect(all.sum).toBeGreaterThanOrEqual(10 + 30 + 100 + 7200)
    // Handed back to wait again (its worker stopping): claimable from then, not from its first wait (2 h before).
    const back = claimed.find((j) => j.id === ids[1]) as Job
    await queue.release(back, 'queue-wait-test')
    expect(await database.query("SELECT ready_at > now() - interval '10 minutes' AS fresh FROM fleet_jobs WHERE id = $1", [back.id])).toEqual([{ fresh: true }])
    expect((await queue.claim('queue-wait-test'))?.id).toBe(back.id)
    const again = await histogram(s)
    expect(again.count).toBe(5)
    expect(bucket(again, '3600')).toBe(4)
    expect(again.sum).toBeLessThan(all.sum + 600)

    // Finished long ago and expired by cleanup: the jobs are gone, what they waited stays counted.
    await database.query(`UPDATE fleet_jobs SET state = 'done', finished_at = now() - interval '40 days'`)
    expect(await expireRows(pool, 30, 60, false)).toMatchObject({ jobs: 4 })
    expect(await database.query('SELECT count(*)::int AS n FROM fleet_jobs')).toEqual([{ n: 0 }])
    expect(await histogram(s)).toEqual(again)
  })
})
