import { writeFileSync } from 'node:fs'
import pg from 'pg'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { fleetCounterTotals } from '../../src/storage/index/fleet-counters.js'
import { endless, finish, until } from '../helpers/fleet-hosts.js'
import { enqueue, holdAt, started, startWorker, stopCleanly } from '../helpers/fleet-worker.js'
import { usePostgres } from '../helpers/use-postgres.js'
import { exitOf } from '../helpers/wait.js'
import { agentRequests, readTask, runSetup } from '../run/harness.js'
import type { RunSetup } from '../run/harness.js'

/**
 * A job whose task is in paused/ by design, under a live worker (docs/contract.md §14.3): its agent is starting (a resume's
 * task stays in paused/ until the agent takes it), or it has just paused for a usage limit and its worker is about to end
 * the job as a wait. A watch-locks pass at that moment leaves the job to its worker: settled by the pass, the attempt was
 * recorded `stopped` and a resume queued at once (run before the limit lifts; history, attempts and
 * ctxagent_job_retries_total{reason="stopped"} wrong). Real worker, agent and watch-locks processes; each moment is held
 * by a hold point (src/test-pause.ts), not a timing.
 */
const database = usePostgres({
  schema: true,
  truncate: ['fleet_jobs', 'fleet_workers', 'fleet_job_attempts', 'fleet_counters', 'fleet_counter_log', 'llm_key_limits', 'tasks'],
})
const query = database.query
const db = database.env
let pool: pg.Pool
beforeAll(() => {
  pool = new pg.Pool({ connectionString: database.server.url, max: 1 })
})
afterAll(async () => {
  await pool?.end()
})

interface History {
  job_id: string
  attempt: number
  reason: string
  again: boolean
}
const history = () => query<History>('SELECT job_id::text, attempt, reason, again FROM fleet_job_attempts ORDER BY job_id, attempt')
const jobRows = () =>
  query<{ id: string; kind: string; state: string; attempts: number; wait_reason: string | null }>(
    'SELECT id::text, kind, state, attempts, wait_reason FROM fleet_jobs ORDER BY id',
  )

/** A watch-locks pass from another process (it ran: no other pass held the lease), which must leave `uuid`'s job alone. */
async function passLeaves(s: RunSetup, uuid: string): Promise<void> {
  const pass = await s.run(['watch-locks', '--once'], db())
  expect(pass.code, pass.stderr).toBe(0)
  expect(pass.stderr).toBe('')
  expect(pass.stdout).toMatch(/watch-locks: \d+ running task\(s\) checked/)
  // A job it settled is one line: `job N (task <uuid>): …` (command-kit/settled.ts).
  expect(pass.stdout).not.toContain(`(task ${uuid})`)
}

/** ctxagent_job_retries_total's samples, as /metrics reads them (the rolled-up counters and the log since). */
async function retries(): Promise<Record<string, number>> {
  return (await fleetCounterTotals(pool))?.retries ?? {}
}

describe('watch-locks beside a live worker whose task is in paused/ by design', () => {
  it('a resume whose agent is starting: the pass leaves it; the agent takes the task and the job completes in one attempt', { timeout: 240_000 }, async () => {
    const s = await runSetup()
    // A task paused by SIGINT, to be resumed by a job.
    endless(s)
    const run = s.start(['run', '--task', 'look around', '--workspace', s.ws, '--max-turns', '1000000'])
    await until('the task under way', async () => agentRequests(s.fake).length >= 2)
    run.child.kill('SIGINT')
    expect((await exitOf(run.child)).code).toBe(130)
    const uuid = s.tree.layout.list('paused')[0] as string
    s.fake.fallback = () => finish
    const hold = holdAt('run:before-take')
    const worker = startWorker(s, database.server.url, [], hold.env)
    await started(worker)
    await enqueue(s, database, ['--resume', uuid])
    await until('its agent starting', hold.reached)
    expect(readTask(s.tree, uuid).location).toBe('paused')
    await passLeaves(s, uuid)
    expect(await jobRows()).toMatchObject([{ kind: 'resume', state: 'running', attempts: 1 }])
    expect(await history()).toEqual([])
    hold.release()
    const [job] = await until('the job done', async () => {
      const rows = await jobRows()
      return rows[0]?.state === 'done' ? rows : null
    })
    expect(readTask(s.tree, uuid)).toMatchObject({ location: 'completed', state: { status: 'completed' } })
    // One job, one attempt, no resume queued beside it.
    expect(await jobRows()).toHaveLength(1)
    expect(await history()).toEqual([{ job_id: job?.id, attempt: 1, reason: 'completed', again: false }])
    expect(await retries()).toEqual({})
    await stopCleanly(worker)
  })

  it('a task just paused for a usage limit: the pass leaves it; its worker ends the job as a wait, one attempt, no resume, no `stopped` retry', {
    timeout: 240_000,
  }, async () => {
    const s = await runSetup()
    // A client that waits at most 50 ms for a Retry-After: an hour's is a usage limit, and the task pauses for it.
    s.fake.fallback = () => ({ status: 429, headers: { 'retry-after': '3600' }, content: 'usage limit reached for this key' })
    const config = s.fake.configYaml('').replace('llm:\n', 'llm:\n  max_retry_wait: 0.05\n')
    writeFileSync(s.config, config)
    const hold = holdAt('worker:settling')
    const worker = startWorker(s, database.server.url, [], hold.env)
    await started(worker)
    const uuid = await enqueue(s, database, ['--task', 'alpha', '--workspace', s.ws])
    await until('the worker settling the job', hold.reached)
    expect(readTask(s.tree, uuid)).toMatchObject({ location: 'paused', state: { paused_by: 'rate-limit' } })
    await passLeaves(s, uuid)
    const [claimed] = await jobRows()
    expect(claimed).toMatchObject({ kind: 'new', state: 'running', attempts: 1 })
    expect(await history()).toEqual([])
    hold.release()
    const [job] = await until('the job waiting out the limit', async () => {
      const rows = await jobRows()
      return rows[0]?.state === 'retrying' ? rows : null
    })
    // The same job waits (a resume of its task from now on), its attempt not spent again.
    expect(job).toMatchObject({ id: claimed?.id, kind: 'resume', state: 'retrying', attempts: 1, wait_reason: 'rate-limit' })
    // Waiting by design: a pass now leaves it too (it is not running), and no resume was queued.
    await passLeaves(s, uuid)
    expect(await jobRows()).toHaveLength(1)
    expect(await history()).toEqual([{ job_id: job?.id, attempt: 1, reason: 'rate-limit', again: true }])
    expect(await retries()).toEqual({ 'rate-limit': 1 })
    await stopCleanly(worker)
  })
})
