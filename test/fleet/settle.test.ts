import { describe, expect, it } from 'vitest'
import { exitOf } from '../helpers/wait.js'
import { agentPid, endless, FAST_LOCKS, finish, until } from '../helpers/fleet-hosts.js'
import { started, startWorker } from '../helpers/fleet-worker.js'
import { canKillServer } from '../helpers/postgres.js'
import { usePostgres } from '../helpers/use-postgres.js'
import { fleetJobs } from '../helpers/fleet-jobs.js'
import { agentRequests, readTask, runSetup } from '../run/harness.js'
import type { RunSetup } from '../run/harness.js'

/** Every job ends (docs/contract.md §14.3): also one whose task another process ran instead of its agent. */
const database = usePostgres({ schema: true, truncate: ['fleet_jobs', 'fleet_workers', 'fleet_job_attempts', 'tasks'] })
const query = database.query
const db = database.env

/** A task paused by SIGINT (exit 130), to be resumed. */
async function pausedTask(s: RunSetup): Promise<string> {
  endless(s)
  const run = s.start(['run', '--task', 'look around', '--workspace', s.ws, '--max-turns', '1000000'])
  await until('the task under way', async () => agentRequests(s.fake).length >= 2)
  run.child.kill('SIGINT')
  expect((await exitOf(run.child)).code).toBe(130)
  const uuid = s.tree.layout.list('paused')[0] as string
  expect(readTask(s.tree, uuid).state.status).toBe('paused')
  return uuid
}

describe('a resume job whose task another process took', () => {
  it('the worker whose agent found the task locked (exit 4) ends the job with what the operator’s run --resume made of it', async () => {
    const s = await runSetup()
    const uuid = await pausedTask(s)
    const queued = await s.run(['enqueue', '--resume', uuid], db())
    expect(queued.code, queued.stderr).toBe(0)
    // The operator resumes it by hand meanwhile.
    const byHand = s.start(['run', '--resume', uuid])
    const handPid = await until('the hand run to hold the task', async () => (readTask(s.tree, uuid).location === 'running' ? agentPid(s, uuid) : null))
    expect(handPid).toBe(byHand.child.pid)
    const worker = startWorker(s, database.server.url)
    await until('the worker to see the task taken', async () => worker.err().includes(`task ${uuid} is run by another process`))
    expect(await query('SELECT state FROM fleet_jobs')).toEqual([{ state: 'running' }])
    s.fake.fallback = () => finish
    expect((await exitOf(byHand.child)).code).toBe(0)
    const jobs = await until('the job to end', async () => {
      const rows = await query<{ state: string; outcome: string }>('SELECT state, outcome FROM fleet_jobs')
      return rows[0]?.state === 'done' ? rows : null
    })
    expect(jobs).toEqual([{ state: 'done', outcome: 'completed' }])
    expect(readTask(s.tree, uuid)).toMatchObject({ location: 'completed', state: { status: 'completed' } })
    worker.child.kill('SIGTERM')
    expect((await exitOf(worker.child)).code).toBe(0)
  })

  it('watch-locks ends a live worker’s job whose task has ended (completed/), which that worker forgot', async () => {
    const s = await runSetup()
    s.fake.fallback = () => finish
    const done = await s.run(['run', '--task', 'x', '--workspace', s.ws])
    expect(done.code, done.stderr).toBe(0)
    const uuid = s.tree.layout.list('completed')[0] as string
    const worker = startWorker(s, database.server.url)
    await started(worker)
    const [{ id } = { id: '' }] = await query<{ id: string }>('SELECT id FROM fleet_workers')
    // Its job, running on that live worker, as a worker that lost track of it leaves it.
    await query(
      `INSERT INTO fleet_jobs (task_uuid, kind, spec, state, claimed_by, claimed_at, attempts) VALUES ($1, 'resume', '{}', 'running', $2, now(), 1)`,
      [uuid, id],
    )
    const pass = await s.run(['watch-locks', '--once'], db())
    expect(pass.code, pass.stderr).toBe(0)
    expect(pass.stdout).toContain(`(task ${uuid}): completed`)
    expect(await query('SELECT state, outcome FROM fleet_jobs')).toEqual([{ state: 'done', outcome: 'completed' }])
    worker.child.kill('SIGTERM')
    expect((await exitOf(worker.child)).code).toBe(0)
  })
})

describe('a job whose task waits in paused/ by design', () => {
  // A resume's task is in paused/ until its agent takes it, and a task that paused for a usage limit is there while its
  // worker ends the job as a wait: the live worker settles it. watch-locks must not record the attempt `stopped` and
  // queue a resume at once (the job would run again before the limit lifts, its history and retries counted wrong).
  it('watch-locks leaves a live worker’s job whose task is in paused/; once that worker is gone, it settles it', async () => {
    const s = await runSetup()
    const uuid = await pausedTask(s)
    const worker = startWorker(s, database.server.url)
    await started(worker)
    const [{ id } = { id: '' }] = await query<{ id: string }>('SELECT id FROM fleet_workers')
    await query(
      `INSERT INTO fleet_jobs (task_uuid, kind, spec, state, claimed_by, claimed_at, attempts) VALUES ($1, 'resume', '{}', 'running', $2, now(), 1)`,
      [uuid, id],
    )
    const pass = await s.run(['watch-locks', '--once'], db())
    expect(pass.code, pass.stderr).toBe(0)
    expect(pass.stdout).not.toContain(`(task ${uuid})`)
    expect(await query('SELECT kind, state, attempts FROM fleet_jobs')).toEqual([{ kind: 'resume', state: 'running', attempts: 1 }])
    expect(await query('SELECT count(*)::int AS n FROM fleet_job_attempts')).toEqual([{ n: 0 }])
    worker.child.kill('SIGTERM')
    expect((await exitOf(worker.child)).code).toBe(0)
    // Its worker gone without ending it: the next pass settles it from its task, as before.
    const again = await s.run(['watch-locks', '--once'], db())
    expect(again.code, again.stderr).toBe(0)
    expect(again.stdout).toContain(`(task ${uuid})`)
    expect((await query<{ state: string }>('SELECT state FROM fleet_jobs WHERE kind = $1 AND claimed_by = $2', ['resume', id]))[0]?.state).not.toBe('running')
  })
})

describe.runIf(canKillServer())('a stop while PostgreSQL is down', () => {
  it('a worker SIGTERMed with the database away pauses its task and exits 0 at once; once it is back, watch-locks settles the job and queues the resume, reindex the index', async () => {
    const s = await runSetup(FAST_LOCKS)
    endless(s)
    const worker = startWorker(s, database.server.url)
    await started(worker)
    const queued = await s.run(['enqueue', '--task', 'look around', '--workspace', s.ws, '--max-turns', '1000000'], db())
    expect(queued.code, queued.stderr).toBe(0)
    const uuid = queued.stdout.trim()
    await until('the task under way', async () => agentRequests(s.fake).length >= 2)
    await database.server.kill()
    worker.child.kill('SIGTERM')
    // Not when the database returns: it is brought back only after the worker has exited.
    expect(await exitOf(worker.child)).toEqual({ code: 0, signal: null })
    expect(worker.err()).toContain('watch-locks settles it once the database is back')
    expect(readTask(s.tree, uuid)).toMatchObject({ location: 'paused', state: { status: 'paused', paused_by: 'signal' } })

    await database.server.restart()
    expect(await query('SELECT kind, state FROM fleet_jobs')).toEqual([{ kind: 'new', state: 'running' }])
    // The stopped worker's heartbeat ages past locks.stale_after: a pass then settles its job as the worker would have.
    const jobs = await until('watch-locks to settle the job', async () => {
      await s.run(['watch-locks', '--once'], db())
      const rows = await fleetJobs(database)
      return rows[0]?.state === 'done' ? rows : null
    })
    expect(jobs).toMatchObject([
      { kind: 'new', state: 'done', outcome: 'paused' },
      { kind: 'resume', state: 'waiting', outcome: null },
    ])
    expect((await s.run(['reindex'], db())).code).toBe(0)
    expect(await query('SELECT uuid, status, location FROM tasks')).toEqual([{ uuid, status: 'paused', location: 'paused' }])
  })
})
