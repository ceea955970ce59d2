import pg from 'pg'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { cancelJob } from '../../src/fleet/queue/job-admin.js'
import { JobQueue } from '../../src/fleet/queue/job-queue.js'
import type { Job, JobEnd } from '../../src/fleet/queue/job.js'
import type { RetryPolicy } from '../../src/fleet/queue/retry-policy.js'
import { registerWorker } from '../../src/fleet/worker/registry.js'
import { expireRows } from '../../src/operations/retention.js'
import { PG_FLEET_COUNTERS_MIGRATION } from '../../src/storage/index/fleet-counters.js'
import { migrate, SCHEMA_VERSION, versionBefore } from '../../src/storage/index/pg-schema.js'
import { makeTree, uuidN } from '../fixtures/tree.js'
import { usePostgres } from '../helpers/use-postgres.js'
import { startServe } from './helpers.js'
import type { Serve } from './helpers.js'
import { parseExposition } from './exposition.js'
import type { Sample } from './exposition.js'

/**
 * The fleet's counters on /metrics (docs/serve.md#fleet-counters), on real PostgreSQL through a
 * real serve: counted by triggers as each claim, end and attempt happens, they never fall when
 * cleanup expires the jobs and their history, nor when an older schema is migrated to them.
 */
const database = usePostgres({ schema: true })
let pool: pg.Pool
beforeAll(() => {
  pool = new pg.Pool({ connectionString: database.server.url, max: 2 })
})
afterAll(async () => {
  await pool?.end()
})

const COUNTERS = ['ctxagent_job_claims_total', 'ctxagent_jobs_finished_total', 'ctxagent_job_retries_total', 'ctxagent_budget_pauses_total'] as const
const RETRY: RetryPolicy = { base_seconds: 30, max_seconds: 1800, max_attempts: 8, max_wait_hours: 24 }

/** One scrape's fleet counters, each as {label value: n} (the one label each has), and the queue waits' count. */
async function counters(s: Serve): Promise<{ families: Record<string, Record<string, number>>; waits: number; samples: Record<string, Sample[]> }> {
  const res = await s.get('/metrics')
  expect(res.status).toBe(200)
  const m = parseExposition(await res.text())
  expect(m.get('ctxagent_scrape_errors')?.samples[0]?.value).toBe(0)
  const families: Record<string, Record<string, number>> = {}
  const samples: Record<string, Sample[]> = {}
  for (const name of COUNTERS) {
    const family = m.get(name)
    expect(family?.type).toBe('counter')
    samples[name] = family?.samples ?? []
    families[name] = Object.fromEntries((family?.samples ?? []).map((x) => [Object.values(x.labels)[0] as string, x.value]))
  }
  const waits = m.get('ctxagent_queue_wait_seconds')?.samples.find((x) => x.name === 'ctxagent_queue_wait_seconds_count')?.value ?? Number.NaN
  return { families, waits, samples }
}

const inAnHour = () => new Date(Date.now() + 3_600_000).toISOString()

describe('the fleet counters on /metrics', () => {
  it('count each claim, end, retry (by reason) and budget pause as it happens, and stay as they are when cleanup expires the jobs and their history', async () => {
    const s = await startServe(makeTree().base, { env: database.env() })
    const queue = new JobQueue(pool)
    const none = await counters(s)
    for (const name of COUNTERS) expect(none.families[name], name).toEqual({})

    const host = (await registerWorker(pool, 'host-a', 4, 60)).id
    const ghost = 'gone-host:1:unregistered'
    for (let i = 1; i <= 8; i++) await queue.enqueue({ task_uuid: uuidN(i), kind: 'new', spec: { task: `t${i}` } })
    const claim = async (worker: string): Promise<Job> => {
      const job = await queue.claim(worker)
      expect(job).not.toBeNull()
      return job as Job
    }
    const finish = async (end: JobEnd, worker = host) => {
      const job = await claim(worker)
      expect(await queue.finish(job, worker, end)).not.toBeNull()
    }
    // A worker whose row is gone: its claims count under host "unknown".
    await finish({ outcome: 'completed' }, ghost)
    // Handed back untouched (its worker stopping as it claimed): a claim all the same (the queue wait histogram observed it), no attempt.
    await queue.release(await claim(host), host)
    await finish({ outcome: 'failed', error: 'HTTP 503', retry: RETRY })
    await finish({ outcome: 'paused', wait: { until: inAnHour(), reason: 'rate-limit', cap: null, maxWaitSeconds: null } })
    await finish({ outcome: 'paused', wait: { until: inAnHour(), reason: 'budget', cap: 'user-daily', maxWaitSeconds: null } })
    // The task's own budget: paused for someone, not run again.
    await finish({ outcome: 'paused', reason: 'budget', cap: 'task' })
    // Its agent killed before the task began: it waits again and is claimed next.
    expect(await queue.retry(await claim(host), host, 3, { outcome: 'failed', error: 'killed', reason: 'killed' })).toBe('waiting')
    await finish({ outcome: 'paused', resume: true })
    await finish({ outcome: 'died', resume: true })
    const last = (await database.query<{ id: string }>(`SELECT id FROM fleet_jobs WHERE task_uuid = $1`, [uuidN(8)]))[0] as { id: string }
    expect((await cancelJob(pool, Number(last.id))).was).toBe('waiting')

    const counted = await counters(s)
    expect(counted.families).toEqual({
      ctxagent_job_claims_total: { 'host-a': 8, unknown: 1 },
      ctxagent_jobs_finished_total: { completed: 1, paused: 2, died: 1, cancelled: 1 },
      ctxagent_job_retries_total: { outage: 1, 'rate-limit': 1, budget: 1, killed: 1, stopped: 1, died: 1 },
      ctxagent_budget_pauses_total: { 'user-daily': 1, task: 1 },
    })
    // Every claim, as the queue wait histogram observed them.
    expect(counted.waits).toBe(9)

    // Finished long ago: cleanup expires them and their history; then the rest go (an operator's delete), workers too.
    await database.query(`UPDATE fleet_jobs SET finished_at = now() - interval '40 days' WHERE state IN ('done', 'failed', 'cancelled')`)
    expect(await expireRows(pool, 30, 60, false)).toMatchObject({ jobs: 5 })
    await database.query('DELETE FROM fleet_jobs')
    await database.query('DELETE FROM fleet_job_attempts')
    await database.query('DELETE FROM fleet_workers')
    const after = await counters(s)
    expect(after.samples).toEqual(counted.samples)
    expect(after.waits).toBe(9)
  })

  it('start, on a database migrated to them, at what its jobs and history said before (read so, without a scrape error, until it is migrated)', async () => {
    await database.query('DROP SCHEMA public CASCADE; CREATE SCHEMA public')
    const client = await pool.connect()
    try {
      await migrate(client)
      // The schema as the version before made it: no counters' table, no triggers.
      await client.query(
        `DROP TABLE fleet_counter_log, fleet_queue_wait_log; DROP FUNCTION fleet_tallies_roll_up(); DROP INDEX idx_fleet_jobs_claimable;
         DROP TRIGGER fleet_jobs_count ON fleet_jobs; DROP TRIGGER fleet_job_attempts_count ON fleet_job_attempts; DROP TABLE fleet_counters;
         UPDATE ctxagent_schema SET version = ${versionBefore(PG_FLEET_COUNTERS_MIGRATION)}`,
      )
    } finally {
      client.release()
    }
    // What an older ctxagent left: jobs claimed by a worker still registered and by one gone, ended and open; attempts.
    await database.query(`INSERT INTO fleet_workers (id, hostname, host_id, pid, concurrency) VALUES ('host-old:7:w', 'host-old', 'boot', 7, 2)`)
    await database.query(
      `INSERT INTO fleet_jobs (task_uuid, kind, spec, state, claimed_by, outcome, finished_at) VALUES
         ('${uuidN(1)}', 'new', '{}', 'done', 'host-old:7:w', 'completed', now()),
         ('${uuidN(2)}', 'new', '{}', 'done', 'host-old:7:w', 'completed', now()),
         ('${uuidN(3)}', 'new', '{}', 'failed', 'gone:1:w', 'failed', now()),
         ('${uuidN(4)}', 'new', '{}', 'cancelled', NULL, 'cancelled', now()),
         ('${uuidN(5)}', 'new', '{}', 'waiting', NULL, NULL, NULL)`,
    )
    await database.query(
      `INSERT INTO fleet_job_attempts (job_id, attempt, outcome, reason, cap, again) VALUES
         (3, 1, 'failed', 'outage', NULL, true), (3, 2, 'failed', 'outage', NULL, true),
         (1, 1, 'paused', 'budget', 'fleet-daily', true), (2, 1, 'paused', 'budget', 'task', false)`,
    )
    const before = {
      ctxagent_job_claims_total: { 'host-old': 2, unknown: 1 },
      ctxagent_jobs_finished_total: { completed: 2, failed: 1, cancelled: 1 },
      ctxagent_job_retries_total: { outage: 2, budget: 1 },
      ctxagent_budget_pauses_total: { 'fleet-daily': 1, task: 1 },
    }
    const s = await startServe(makeTree().base, { env: database.env() })
    // Not migrated yet (serve does not migrate): counted from the rows, as before.
    const old = await counters(s)
    expect(old.families).toEqual(before)

    const client2 = await pool.connect()
    try {
      await migrate(client2)
    } finally {
      client2.release()
    }
    expect(await database.query('SELECT version FROM ctxagent_schema')).toEqual([{ version: SCHEMA_VERSION }])
    const migrated = await counters(s)
    expect(migrated.samples).toEqual(old.samples)

    // Counted on from there, and kept when the rows go.
    expect((await new JobQueue(pool).claim('host-old:7:w'))?.task_uuid).toBe(uuidN(5))
    const on = await counters(s)
    expect(on.families.ctxagent_job_claims_total).toEqual({ 'host-old': 3, unknown: 1 })
    await database.query('DELETE FROM fleet_jobs; DELETE FROM fleet_job_attempts; DELETE FROM fleet_workers')
    expect((await counters(s)).samples).toEqual(on.samples)
  })
})
