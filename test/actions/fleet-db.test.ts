import pg from 'pg'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { fleetListenUrl, fleetPool, fleetReapPass, settledText, withFleetLease } from '../../src/actions/fleet-db.js'
import { createCommandEnv, withTaskEnv } from '../../src/command-env.js'
import type { CommandEnv } from '../../src/command-env.js'
import { CtxError, UsageError } from '../../src/errors.js'
import { JobQueue } from '../../src/fleet/queue/job-queue.js'
import type { Job } from '../../src/fleet/queue/job.js'
import { registerWorker } from '../../src/fleet/worker/registry.js'
import { stalenessPolicy } from '../../src/storage/task/env.js'
import { makeTree, uuidN } from '../fixtures/tree.js'
import { usePostgres } from '../helpers/use-postgres.js'

// The fleet's database as commands get it (fleetPool), its listen URL, and the fleet-wide passes
// under their lease (withFleetLease, fleetReapPass), on a real PostgreSQL. The recovery itself is
// driven with real workers in test/fleet/recovery.test.ts; here, what the action adds around it.
const database = usePostgres({ truncate: ['fleet_jobs', 'fleet_job_attempts', 'fleet_workers', 'fleet_leases'] })

interface Said {
  warnings: string[]
  errors: string[]
}

/** A command's env on the test's database (or `env`), its warnings and raw stderr kept. */
async function fleetEnv(env: Record<string, string> = database.env()): Promise<{ ctx: CommandEnv; said: Said }> {
  const tree = makeTree()
  const base = await createCommandEnv({ home: tree.base, config: 'none' }, env)
  const said: Said = { warnings: [], errors: [] }
  const io = { ...base.io, warn: (text: string) => void said.warnings.push(text), err: (text: string) => void said.errors.push(text) }
  return { ctx: { ...base, io }, said }
}

async function caught(promise: Promise<unknown>): Promise<unknown> {
  return promise.then(
    () => 'no refusal',
    (err: unknown) => err,
  )
}

/** A pass that holds `name`'s lease until `release()`: another host's, as far as the next pass can tell. */
function heldLease(ctx: CommandEnv, name: 'watch-locks' | 'cleanup'): { running: Promise<boolean>; taken: Promise<void>; release: () => void } {
  let release = (): void => undefined
  let taken = (): void => undefined
  const isTaken = new Promise<void>((resolve) => (taken = resolve))
  const running = withFleetLease(ctx, name, { intervalMs: 60_000, once: true }, async () => {
    taken()
    await new Promise<void>((resolve) => (release = resolve))
  })
  return { running, taken: isTaken, release: () => release() }
}

describe('fleetPool', () => {
  it('refuses a command without a fleet database (exit 2), and one it cannot reach (exit 1, its password never said)', async () => {
    const none = await caught(fleetPool((await fleetEnv({})).ctx, 'watch-locks'))
    expect(none).toBeInstanceOf(UsageError)
    expect(none).toMatchObject({
      exitCode: 2,
      message: "watch-locks needs the fleet's PostgreSQL database",
      hint: 'set fleet.database_url in the config, or CTXAGENT_DATABASE_URL',
    })
    const down = await caught(fleetPool((await fleetEnv({ CTXAGENT_DATABASE_URL: 'postgres://u:s3cret-pw@127.0.0.1:1/x' })).ctx, 'enqueue'))
    expect(down).toBeInstanceOf(CtxError)
    expect(down).toMatchObject({ exitCode: 1, hint: 'check fleet.database_url or CTXAGENT_DATABASE_URL and that the server is up' })
    expect((down as Error).message).toMatch(/^cannot reach the fleet's database \(.*ECONNREFUSED.*\)$/)
    expect((down as Error).message).not.toContain('s3cret-pw')
  })

  it("hands back a pool on the fleet's database with its schema migrated", async () => {
    const { pool, url } = await fleetPool((await fleetEnv()).ctx, 'enqueue')
    try {
      expect(url).toBe(database.server.url)
      const tables = await pool.query<{ t: string | null }>("SELECT to_regclass('fleet_jobs')::text AS t")
      expect(tables.rows).toEqual([{ t: 'fleet_jobs' }])
    } finally {
      await pool.end()
    }
  })
})

describe('fleetListenUrl', () => {
  it('is fleet.listen_url when set (a direct connection beside a pooler), else the database URL', async () => {
    const { ctx } = await fleetEnv()
    expect(fleetListenUrl(ctx, 'postgres://pooler/db')).toBe('postgres://pooler/db')
    const direct = { ...ctx, config: { ...ctx.config, fleet: { ...ctx.config.fleet, listen_url: 'postgres://direct/db' } } }
    expect(fleetListenUrl(direct, 'postgres://pooler/db')).toBe('postgres://direct/db')
  })
})

describe('withFleetLease', () => {
  it('runs one pass at a time fleet-wide: another is skipped with a warning while it runs, and runs once it ended', async () => {
    const first = await fleetEnv()
    const held = heldLease(first.ctx, 'cleanup')
    await held.taken
    const second = await fleetEnv()
    let ran = false
    expect(await withFleetLease(second.ctx, 'cleanup', { intervalMs: 60_000, once: false }, async () => void (ran = true))).toBe(false)
    expect(ran).toBe(false)
    expect(second.said.warnings).toEqual([expect.stringMatching(/^another host runs cleanup \(.+\); this one was skipped$/)])
    held.release()
    expect(await held.running).toBe(true)
    expect(await withFleetLease(second.ctx, 'cleanup', { intervalMs: 60_000, once: false }, async () => void (ran = true))).toBe(true)
    expect(ran).toBe(true)
  })

  it('refused for longer than its interval: a single pass fails (exit 1), a loop says it on stderr and goes on', async () => {
    const held = heldLease((await fleetEnv()).ctx, 'watch-locks')
    await held.taken
    // An interval of 0: the second refusal comes later than the first, so past it.
    const loop = await fleetEnv()
    const pass = { intervalMs: 0, once: false }
    expect(await withFleetLease(loop.ctx, 'watch-locks', pass, async () => undefined)).toBe(false)
    expect(await withFleetLease(loop.ctx, 'watch-locks', pass, async () => undefined)).toBe(false)
    expect(loop.said.errors.at(-1)).toMatch(
      /^ctxagent: no watch-locks pass has run for \d+ s, longer than its interval: each is refused the fleet-wide lease, held by .+\n$/,
    )
    const once = await caught(withFleetLease((await fleetEnv()).ctx, 'watch-locks', { intervalMs: 0, once: true }, async () => undefined))
    expect(once).toBeInstanceOf(CtxError)
    expect(once).toMatchObject({ exitCode: 1, hint: 'if that host is gone its lease expires by itself; if it is stuck, stop that pass' })
    held.release()
    await held.running
  })
})

describe('fleetReapPass', () => {
  let pool: pg.Pool
  beforeAll(() => {
    pool = new pg.Pool({ connectionString: database.server.url, max: 2 })
  })
  afterAll(async () => {
    await pool?.end()
  })

  async function pass(ctx: CommandEnv, once = true) {
    const options = {
      policy: stalenessPolicy(ctx.config),
      longRunningMs: 3_600_000,
      noProgressMs: 3_600_000,
      chat: { hardTimeoutMs: 3_600_000, graceMs: 1000 },
    }
    return withTaskEnv(ctx, (env) => fleetReapPass(ctx, env, options, { intervalMs: 60_000, once }))
  }

  it('settles a running job whose task has ended, from what its task became, and says so in one line', async () => {
    const { ctx } = await fleetEnv()
    await fleetPool(ctx, 'watch-locks').then(({ pool: p }) => p.end())
    const queue = new JobQueue(pool)
    const worker = (await registerWorker(pool, 'fleet-db-test', 1, 60)).id
    await queue.enqueue({ task_uuid: uuidN(7), kind: 'new', spec: { task: 't' } })
    const job = (await queue.claim(worker)) as Job
    // Its agent completed the task; its worker never ended the job (it died, or forgot).
    const tree = makeTree()
    const here = { ...ctx, layout: tree.layout }
    tree.write({ uuid: uuidN(7), location: 'completed', status: 'completed' })
    const outcome = await pass(here)
    expect(outcome.settled).toEqual([{ job: job.id, task: uuidN(7), outcome: 'completed', resumed: false }])
    expect(outcome.result.jobs_recovered).toBe(1)
    expect(settledText(outcome.settled[0] as (typeof outcome.settled)[number])).toBe(`job ${job.id} (task ${uuidN(7)}): completed`)
    expect(await database.query('SELECT state, outcome FROM fleet_jobs WHERE id = $1', [job.id])).toEqual([{ state: 'done', outcome: 'completed' }])
    // Settled once: the next pass finds nothing to do.
    expect((await pass(here)).settled).toEqual([])
  })

  it('does nothing while another host holds the pass, and says so', async () => {
    const held = heldLease((await fleetEnv()).ctx, 'watch-locks')
    await held.taken
    const { ctx, said } = await fleetEnv()
    const outcome = await pass(ctx, false)
    expect(outcome).toEqual({ result: { checked: 0, findings: [], reindexed: 0, jobs_recovered: 0 }, settled: [] })
    expect(said.warnings).toEqual([expect.stringMatching(/^another host runs a watch-locks pass \(.+\); this one was skipped$/)])
    held.release()
    await held.running
  })
})

it('settledText names a queued resume', () => {
  expect(settledText({ job: 3, task: uuidN(1), outcome: 'paused', resumed: true })).toBe(`job 3 (task ${uuidN(1)}): paused, its resume queued`)
})
