import { randomUUID } from 'node:crypto'
import pg from 'pg'
import { afterAll, beforeAll, beforeEach, describe, expect, it, onTestFinished } from 'vitest'
import { JobQueue } from '../../src/fleet/queue/job-queue.js'
import type { IdleChannel } from '../../src/fleet/queue/job.js'
import { ALL_WORKERS_CHANNEL, JobListener } from '../../src/fleet/queue/listener.js'
import type { WakeFrom } from '../../src/fleet/queue/listener.js'
import { registerWorker } from '../../src/fleet/worker/registry.js'
import { migrate } from '../../src/storage/index/pg-schema.js'
import { finish, until } from '../helpers/fleet-hosts.js'
import { startWorker } from '../helpers/fleet-worker.js'
import { queryRows, startPostgres } from '../helpers/postgres.js'
import type { PgServer } from '../helpers/postgres.js'
import { exitOf } from '../helpers/wait.js'
import { readTask, runSetup } from '../run/harness.js'

/**
 * docs/contract.md §14.5: a job that starts waiting wakes one idle worker (its own channel), not every
 * idle one; with none idle, every worker hears it; a chosen worker that is frozen or gone
 * does not strand the job (another's poll takes it).
 */
let server: PgServer
let pool: pg.Pool
beforeAll(async () => {
  server = await startPostgres()
  pool = new pg.Pool({ connectionString: server.url, max: 4 })
  const client = await pool.connect()
  await migrate(client)
  client.release()
})
afterAll(async () => {
  await pool?.end()
  await server?.stop()
})
beforeEach(async () => {
  await pool.query('TRUNCATE fleet_jobs, fleet_workers, fleet_idle')
})

/**
 * An idle worker as the worker's own code makes one: registered, LISTENing through
 * JobListener on its channel and on the one all hear, its claims through JobQueue.claim
 * (which puts it in fleet_idle when it finds nothing). It counts its wake-ups by channel and
 * claims on each one meant for it alone.
 */
interface Emulated {
  id: string
  idle: IdleChannel
  wakes: Record<WakeFrom, number>
  claimed: number[]
}

async function idleWorkers(n: number): Promise<Emulated[]> {
  const queue = new JobQueue(pool)
  const workers: Emulated[] = []
  for (let i = 0; i < n; i++) {
    const record = await registerWorker(pool, 'dispatch-test', 1, 60)
    const w: Emulated = {
      id: record.id,
      idle: { channel: `ctxagent_w_${randomUUID().replaceAll('-', '')}`, staleSeconds: 60 },
      wakes: { own: 0, all: 0, cancel: 0, connected: 0 },
      claimed: [],
    }
    const listener = new JobListener(server.url, w.idle.channel, (from) => {
      w.wakes[from]++
      if (from === 'all') return
      void queue.claim(w.id, null, w.idle).then((job) => job !== null && w.claimed.push(job.id))
    })
    onTestFinished(() => listener.stop())
    workers.push(w)
    await listener.start()
  }
  // Each claimed once on connecting, found nothing, and is idle now.
  await until('every worker idle', async () => Number((await queryRows<{ n: string }>(server.url, 'SELECT count(*) AS n FROM fleet_idle'))[0]?.n) === n)
  return workers
}

/** A NOTIFY on the channel all workers hear, awaited by each: every notification sent before it has been delivered. */
async function barrier(workers: Emulated[], tag: string): Promise<void> {
  const before = workers.map((w) => w.wakes.all)
  const client = new pg.Client({ connectionString: server.url })
  await client.connect()
  // Notifications reach each session in commit order: once the barrier has arrived, all sent before it have.
  await client.query('SELECT pg_notify($1, $2)', [ALL_WORKERS_CHANNEL, tag])
  await client.end()
  await until(`the barrier ${tag} to reach every worker`, async () => workers.every((w, i) => w.wakes.all > (before[i] ?? 0)))
}

async function enqueue(n: number): Promise<void> {
  const queue = new JobQueue(pool)
  const client = await pool.connect()
  try {
    await client.query('BEGIN')
    for (let i = 0; i < n; i++) await queue.enqueue({ task_uuid: randomUUID(), kind: 'new', spec: { task: 't' } }, client)
    await client.query('COMMIT')
  } finally {
    client.release()
  }
}

describe('wake one idle worker per job', () => {
  it('a job wakes one of 20 idle workers, three jobs in one transaction three of them; none idle: every worker hears it', { timeout: 120_000 }, async () => {
    const workers = await idleWorkers(20)
    const allBefore = workers.map((w) => w.wakes.all)
    await enqueue(1)
    await until('one worker to claim the job', async () => workers.some((w) => w.claimed.length === 1))
    await barrier(workers, 'one')
    expect(workers.reduce((n, w) => n + w.wakes.own, 0)).toBe(1)
    // Nothing but the barrier on the channel all hear.
    expect(workers.map((w, i) => w.wakes.all - (allBefore[i] ?? 0))).toEqual(workers.map(() => 1))

    await enqueue(3)
    await until('three more claims', async () => workers.reduce((n, w) => n + w.claimed.length, 0) === 4)
    await barrier(workers, 'three')
    expect(workers.reduce((n, w) => n + w.wakes.own, 0)).toBe(4)
    // Each job went to another worker, each claimed by the worker it woke.
    expect(workers.filter((w) => w.claimed.length > 0).length).toBe(4)
    expect(workers.every((w) => w.claimed.length === w.wakes.own)).toBe(true)
    const rows = await queryRows<{ n: string }>(server.url, `SELECT count(DISTINCT claimed_by) AS n FROM fleet_jobs WHERE state = 'running'`)
    expect(rows[0]?.n).toBe('4')

    // No worker idle: the job is heard by all (the busy ones with a free slot claim it).
    await pool.query('DELETE FROM fleet_idle')
    const heard = workers.map((w) => w.wakes.all)
    await enqueue(1)
    await until('every worker to hear the job', async () => workers.every((w, i) => w.wakes.all > (heard[i] ?? 0)))
  })

  it('passes over an idle worker whose heartbeat is stale, and a stopped one', { timeout: 120_000 }, async () => {
    const [stale, stopped, live] = await idleWorkers(3)
    await pool.query(`UPDATE fleet_workers SET heartbeat_at = now() - interval '10 minutes' WHERE id = $1`, [stale?.id])
    await pool.query(`UPDATE fleet_workers SET stopped_at = now() WHERE id = $1`, [stopped?.id])
    await enqueue(1)
    await until('the live worker to claim the job', async () => live?.claimed.length === 1)
    await barrier([stale, stopped, live] as Emulated[], 'stale')
    expect([stale?.wakes.own, stopped?.wakes.own, live?.wakes.own]).toEqual([0, 0, 1])
  })

  it('a wake-up passed on (by a worker with no free slot) goes to the next idle worker, then to all when none is', { timeout: 120_000 }, async () => {
    const workers = await idleWorkers(2)
    const queue = new JobQueue(pool)
    // Nothing waits: each woken worker claims nothing and is idle again, at the back of the line
    // (its claim puts its row back: waited for, so that the next step sees both rows as they settle).
    const idleAgain = async () =>
      until('both workers idle again', async () => Number((await queryRows<{ n: string }>(server.url, 'SELECT count(*) AS n FROM fleet_idle'))[0]?.n) === 2)
    await queue.passWake()
    await until('one worker woken', async () => workers.reduce((n, w) => n + w.wakes.own, 0) === 1)
    await idleAgain()
    await queue.passWake()
    await until('the other worker woken', async () => workers.every((w) => w.wakes.own === 1))
    await idleAgain()
    await pool.query('DELETE FROM fleet_idle')
    const heard = workers.map((w) => w.wakes.all)
    await queue.passWake()
    await until('every worker to hear it', async () => workers.every((w, i) => w.wakes.all > (heard[i] ?? 0)))
  })
})

describe('a chosen worker that cannot take the job', () => {
  it('is frozen (SIGSTOP): the job is run by another worker, on its poll', { timeout: 240_000 }, async () => {
    // Heartbeats far apart: the frozen worker stays live (and so is chosen) for the whole test.
    const s = await runSetup('locks:\n  heartbeat_seconds: 30\n  stale_after_seconds: 120\nfleet:\n  poll_seconds: 1\n')
    s.fake.fallback = () => finish
    const idle = async (n: number): Promise<void> => {
      await until(`${n} idle worker(s)`, async () => Number((await queryRows<{ n: string }>(server.url, 'SELECT count(*) AS n FROM fleet_idle'))[0]?.n) === n)
    }
    const frozen = startWorker(s, server.url, ['--no-prestart'])
    await idle(1)
    const other = startWorker(s, server.url, ['--no-prestart'])
    await idle(2)
    const frozenId = (await queryRows<{ id: string }>(server.url, 'SELECT id FROM fleet_workers WHERE pid = $1', [frozen.child.pid]))[0]?.id
    expect(frozenId).toBeDefined()
    frozen.child.kill('SIGSTOP')
    onTestFinished(() => void frozen.child.kill('SIGCONT'))
    const res = await s.run(['enqueue', '--task', 'frozen', '--workspace', s.ws], { CTXAGENT_DATABASE_URL: server.url })
    expect(res.code, res.stderr).toBe(0)
    const uuid = res.stdout.trim()
    await until('the job to be done', async () => (await queryRows<{ state: string }>(server.url, 'SELECT state FROM fleet_jobs'))[0]?.state === 'done')
    // The frozen worker was the one woken (its idle row taken); the other ran the job.
    const job = (await queryRows<{ claimed_by: string }>(server.url, 'SELECT claimed_by FROM fleet_jobs'))[0]
    expect(job?.claimed_by).not.toBe(frozenId)
    expect(await queryRows(server.url, 'SELECT 1 FROM fleet_idle WHERE worker_id = $1', [frozenId])).toEqual([])
    expect(readTask(s.tree, uuid).location).toBe('completed')
    frozen.child.kill('SIGCONT')
    for (const w of [frozen, other]) w.child.kill('SIGTERM')
    expect((await exitOf(frozen.child)).code).toBe(0)
    expect((await exitOf(other.child)).code).toBe(0)
  })
})
