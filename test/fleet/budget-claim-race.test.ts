import { describe, expect, it } from 'vitest'
import { parseConfig } from '../../src/config/load.js'
import { claimBudget } from '../../src/fleet/queue/claim-budget.js'
import { cancelJob, listJobs, showJob } from '../../src/fleet/queue/job-admin.js'
import { fleetCounterTotals } from '../../src/storage/index/fleet-counters.js'
import { queueWaitTotals } from '../../src/storage/index/queue-waits.js'
import type { Job } from '../../src/fleet/queue/job.js'
import { uuidN } from '../fixtures/tree.js'
import { enqueueNth, fleetJobs, queueOn, spend } from '../helpers/fleet-jobs.js'
import { usePostgres } from '../helpers/use-postgres.js'

/**
 * The claim that reads the spend (docs/fleet-operations.md#waits), under many claimers at once
 * and across claims: on real PostgreSQL, the budgets' clock the test's.
 */
const database = usePostgres({ schema: true, truncate: ['fleet_jobs', 'fleet_job_attempts', 'user_spend', 'fleet_counters', 'fleet_counter_log'] })

// A first request may cost 1,000 tokens at $15 per million: $0.015. Erin's model has no price.
const CONFIG = parseConfig(
  [
    'llm:\n  provider: openai\n  max_output_tokens: 1000\n  openai:\n    model: m',
    'budgets:\n  user_daily_usd: 1\n  fleet_daily_usd: 10',
    'users:\n  erin:\n    llm:\n      model: free',
    'pricing:\n  m:\n    prompt: 3\n    completion: 15',
  ].join('\n'),
  'config.yaml',
)
const figures = claimBudget(CONFIG, 'ctxagent')
const NOW = new Date('2030-01-15T10:00:00Z')

describe('the claim and a spent cost cap, across claims and claimers', () => {
  // The fleet's daily cap spent: a job of a priced model waits for the reset, in the claim's statement. Erin's model
  // has no price, "not capped by money": her job is handed out in that statement, and must be by the next claims too.
  // The claim's NOT EXISTS passes over the jobs of everyone the fleet's cap applies to while one waits for fleet-daily, never hers.
  it('a fleet-daily wait never holds back the jobs of a user whose model has no price', async () => {
    const queue = queueOn(database)
    await spend(database, 'bob', '2030-01-15', 9.99)
    const f = await enqueueNth(queue, 1, 'frank', 5)
    const e1 = await enqueueNth(queue, 2, 'erin')
    const budget = figures?.(NOW) ?? null
    expect(await queue.claim('host-a:1:test', null, null, budget)).toMatchObject({ id: e1 })
    expect(await showJob(queue.pool, f)).toMatchObject({ waiting_for: 'budget', wait_cap: 'fleet-daily' })
    const e2 = await enqueueNth(queue, 3, 'erin')
    expect(await queue.claim('host-a:1:test', null, null, budget)).toMatchObject({ id: e2 })
  })

  it('many claimers at once: each job is claimed once or made to wait, never both; none fails, none waits on another', async () => {
    const queue = queueOn(database)
    // Alice's and the fleet's caps are not spent; Carol's daily cap is.
    await spend(database, 'carol', '2030-01-15', 0.99)
    const users = ['alice', 'carol', 'erin', 'dan']
    const ids: number[] = []
    for (let n = 1; n <= 80; n++) ids.push(await enqueueNth(queue, n, users[n % users.length] as string, n % 3))
    const budget = figures?.(NOW) ?? null
    const waits = async () => (await queueWaitTotals(queue.pool)).reduce((sum, r) => sum + r.n, 0)
    const before = await waits()
    const claimers = await Promise.all(Array.from({ length: 8 }, () => queueOn(database, 1)))
    const claimed: Job[] = []
    // Every claimer claims until it finds nothing, all at once; half of them with the per-user limit.
    await Promise.all(
      claimers.map(async (q, i) => {
        for (;;) {
          const job = await q.claim(`host-${i}:1:test`, i % 2 === 0 ? null : 100, null, budget)
          if (job === null) return
          claimed.push(job)
        }
      }),
    )
    const rows = await fleetJobs(database)
    const carol = rows.filter((r) => r.user === 'carol')
    // Each job claimed once, by one claimer.
    expect(new Set(claimed.map((j) => j.id)).size).toBe(claimed.length)
    expect(claimed.every((j) => j.user !== 'carol')).toBe(true)
    expect(claimed.length).toBe(ids.length - carol.length)
    for (const r of rows) {
      if (r.user === 'carol') expect(r).toMatchObject({ state: 'retrying', wait_reason: 'budget', attempts: 0, claimed_by: null })
      else expect(r).toMatchObject({ state: 'running', attempts: 1 })
    }
    // The counters say each claim once.
    const counted = Object.values((await fleetCounterTotals(queue.pool))?.claims ?? {})
    expect(counted.reduce((sum, n) => sum + n, 0)).toBe(claimed.length)
    expect((await waits()) - before).toBe(claimed.length)
  })

  // A user whose task paused on their daily cap (its job waits for the window) and who has more jobs queued, their
  // spend short of the claim's threshold: the claim passes those jobs over (they would be refused at their start), and
  // must not leave them `waiting` with no reason while workers idle: each is made to wait for the same window, until
  // the same time, and says so.
  it('the other jobs of a user held back by a window one of theirs waits for say why and until when', async () => {
    const queue = queueOn(database)
    await spend(database, 'carol', '2030-01-15', 0.5)
    const until = '2030-01-16T00:00:00.000Z'
    await database.query(
      `INSERT INTO fleet_jobs (task_uuid, kind, spec, "user", state, wait_reason, wait_cap, next_run_at) VALUES ($1, 'resume', '{}', 'carol', 'retrying', 'budget', 'user-daily', $2)`,
      [uuidN(20), until],
    )
    const held = [await enqueueNth(queue, 21, 'carol', 5), await enqueueNth(queue, 22, 'carol', 5)]
    const other = await enqueueNth(queue, 23, 'alice')
    expect(await queue.claim('host-a:1:test', null, null, figures?.(NOW) ?? null)).toMatchObject({ id: other })
    for (const id of held) {
      const job = await showJob(queue.pool, id)
      expect(job).toMatchObject({ state: 'retrying', waiting_for: 'budget', wait_cap: 'user-daily', attempts: 0 })
      expect(new Date(job?.next_run_at ?? '').toISOString()).toBe(until)
    }
  })

  // A user who has nearly spent their cap (short of it, but not by a first request: `run` would refuse to start) with
  // more jobs queued than a claim once looked at (it made the first 32 wait, and passed over the rest, which said
  // `waiting` with no reason while workers idled): none is handed out, by a worker with caps or without, and every one
  // says why and until when, in `jobs` and in `jobs show`, while another user's jobs run.
  it('every job of a user held back by a cap they have nearly spent says why and until when, however many they have', async () => {
    const queue = queueOn(database)
    await spend(database, 'carol', '2030-01-15', 0.99)
    const held: number[] = []
    for (let n = 1; n <= 40; n++) held.push(await enqueueNth(queue, n, 'carol', 5))
    const other = await enqueueNth(queue, 41, 'alice')
    expect(await queue.claim('host-a:1:test', null, null, figures?.(NOW) ?? null)).toMatchObject({ id: other })
    expect(await queue.claim('host-a:1:test', null, null, figures?.(NOW) ?? null)).toBeNull()
    const listed = await listJobs(queue.pool, { user: 'carol', limit: 100 })
    expect(listed).toHaveLength(held.length)
    for (const job of listed)
      expect(job).toMatchObject({ state: 'retrying', waiting_for: 'budget', wait_cap: 'user-daily', next_run_at: '2030-01-16T00:00:00.000Z', attempts: 0 })
    expect(await showJob(queue.pool, held.at(-1) as number)).toMatchObject({
      waiting_for: 'budget',
      wait_cap: 'user-daily',
      next_run_at: '2030-01-16T00:00:00.000Z',
      history: [],
    })
    // Her next job, queued meanwhile, is held by the window the others wait for: by a worker without caps configured too.
    const later = await enqueueNth(queue, 42, 'carol', 9)
    expect(await queue.claim('host-b:1:test')).toBeNull()
    expect(await showJob(queue.pool, later)).toMatchObject({ waiting_for: 'budget', wait_cap: 'user-daily', next_run_at: '2030-01-16T00:00:00.000Z' })
  })

  // A job cancelled while its worker hands it back (its agent killed before the task began): JobQueue.retry records
  // the attempt as cancelled and ends the job `cancelled` with that outcome (ctxagent_jobs_finished_total counts it so),
  // and says so, so that the worker does not log "handed back to the queue".
  it('a job cancelled as its worker hands it back ends cancelled, counted so, and is not said to wait again', async () => {
    const queue = queueOn(database)
    const id = await enqueueNth(queue, 7, 'alice')
    const job = await queue.claim('host-a:1:test')
    expect(job).toMatchObject({ id })
    await cancelJob(queue.pool, id)
    const again = await queue.retry(job as Job, 'host-a:1:test', 3, {
      outcome: 'failed',
      error: 'its agent was killed (SIGKILL) before the task began',
      reason: 'killed',
    })
    expect(await showJob(queue.pool, id)).toMatchObject({ state: 'cancelled', outcome: 'cancelled' })
    expect((await fleetCounterTotals(queue.pool))?.finished).toEqual({ cancelled: 1 })
    expect(again).toBe('cancelled')
  })

  // A job with no user (`poll` without --user) runs as the worker's OS user: `run` takes it as the task's user, checks
  // that user's caps and adds the spend to that user's row. The claim must read the same, or it hands the job out to
  // be refused (exit 5) at every claim until fleet.max_attempts fails it, instead of making it wait for the reset.
  it('a job with no user is capped as the OS user its worker runs it as', async () => {
    const queue = queueOn(database)
    const worker = claimBudget(CONFIG, 'ctxagent')?.(NOW) ?? null
    expect(worker?.os_user).toBe('ctxagent')
    await spend(database, 'ctxagent', '2030-01-15', 0.99)
    const spent = await enqueueNth(queue, 8, null)
    expect(await queue.claim('host-a:1:test', null, null, worker)).toBeNull()
    expect(await showJob(queue.pool, spent)).toMatchObject({ state: 'retrying', waiting_for: 'budget', wait_cap: 'user-daily', attempts: 0 })
    // Another worker's OS user has room: its claim hands the same kind of job out.
    const other = await enqueueNth(queue, 9, null)
    expect(await queue.claim('host-b:1:test', null, null, claimBudget(CONFIG, 'worker2')?.(NOW) ?? null)).toMatchObject({ id: other, user: null })
  })
})
