import pg from 'pg'
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest'
import { finish, until } from '../helpers/fleet-hosts.js'
import { startWorker } from '../helpers/fleet-worker.js'
import { queryRows, startPgBouncer, startPostgres } from '../helpers/postgres.js'
import type { PgBouncer, PgServer } from '../helpers/postgres.js'
import { exitOf } from '../helpers/wait.js'
import { readTask, runSetup } from '../run/harness.js'
import type { RunSetup } from '../run/harness.js'

/**
 * The fleet behind a real PgBouncer in `pool_mode = transaction` (docs/contract.md §14.5): every
 * command's database URL is the pooler's, with two server connections shared by all of
 * them, so that session state one client left (a LISTEN, an advisory lock) meets the next.
 */
let server: PgServer
let bouncer: PgBouncer | null
beforeAll(async () => {
  server = await startPostgres()
  bouncer = await startPgBouncer(server)
})
afterAll(async () => {
  await bouncer?.stop()
  await server?.stop()
})

function viaPooler(): { CTXAGENT_DATABASE_URL: string } {
  if (bouncer === null) throw new Error('pgbouncer is not installed (Debian: apt-get install pgbouncer; .ci/run installs it)')
  return { CTXAGENT_DATABASE_URL: bouncer.url }
}

/** Locks (and so leases) stale in a second; a worker that never polls: only a NOTIFY wakes it. */
function fleetYaml(listenUrl: string | null): string {
  return `locks:\n  heartbeat_seconds: 0.2\n  stale_after_seconds: 1\nfleet:\n  poll_seconds: 3600\n${listenUrl === null ? '' : `  listen_url: ${listenUrl}\n`}`
}

async function leases(): Promise<{ name: string; holder: string; live: boolean; done: boolean }[]> {
  return queryRows(server.url, `SELECT name, holder, expires_at > now() AS live, done_at IS NOT NULL AS done FROM fleet_leases ORDER BY name`)
}

describe('behind PgBouncer in transaction mode', () => {
  it('wake-ups arrive through fleet.listen_url: a worker that never polls takes each job as it is queued', { timeout: 180_000 }, async () => {
    const db = viaPooler()
    const s = await runSetup(fleetYaml(server.url))
    s.fake.fallback = () => finish
    const worker = startWorker(s, db.CTXAGENT_DATABASE_URL)
    const first = (await s.run(['enqueue', '--task', 'first', '--workspace', s.ws], db)).stdout.trim()
    await until('the first job ended', async () => /job \d+: completed/.test(worker.err()))
    // Its end woke the worker once more (a claim that found nothing): a command later it is idle.
    expect((await s.run(['fleet', '--json'], db)).code).toBe(0)
    expect(readTask(s.tree, first).location).toBe('completed')
    // The worker is idle now and its LISTEN long established (it claimed the first job after it):
    // with poll_seconds at an hour, only the NOTIFY of the next enqueue can wake it.
    for (const text of ['second', 'third']) {
      const uuid = (await s.run(['enqueue', '--task', text, '--workspace', s.ws], db)).stdout.trim()
      const ended = worker.err().match(/job \d+: completed/g)?.length ?? 0
      await until(`task ${text} completed`, async () => (worker.err().match(/job \d+: completed/g)?.length ?? 0) > ended).catch((err: Error) => {
        throw new Error(`${err.message}; worker said:\n${worker.err().slice(-2000)}`)
      })
      expect(readTask(s.tree, uuid).location).toBe('completed')
      expect((await s.run(['fleet', '--json'], db)).code).toBe(0)
    }
    worker.child.kill('SIGTERM')
    expect((await exitOf(worker.child)).code).toBe(0)
  })

  it('fleet init says when wake-ups cannot arrive through the pooler, and that they do through listen_url', { timeout: 120_000 }, async () => {
    const db = viaPooler()
    const pooled = await runSetup(fleetYaml(null))
    const lost = await pooled.run(['fleet', 'init'], db)
    expect(lost.code).toBe(1)
    expect(lost.stdout).toContain('missing: wake-ups: a NOTIFY did not reach the LISTEN connection')
    expect(lost.stderr).toContain('wake-ups')
    const direct = await runSetup(fleetYaml(server.url))
    const ok = await direct.run(['fleet', 'init'], db)
    expect(ok.stderr).toBe('')
    expect(ok.code).toBe(0)
    expect(ok.stdout).toContain('ok: wake-ups')
  })

  it('many watch-locks and cleanup passes in a row all run: no lock is left on a pooled connection', { timeout: 300_000 }, async () => {
    const db = viaPooler()
    const s = await runSetup(fleetYaml(server.url))
    for (let i = 0; i < 6; i++) {
      for (const args of [['watch-locks', '--once'], ['cleanup']]) {
        const pass = await s.run(args, db)
        expect({ pass: `${args[0]} #${i}`, code: pass.code, stderr: pass.stderr }).toEqual({ pass: `${args[0]} #${i}`, code: 0, stderr: '' })
      }
    }
    // Each left its lease released (expired at once, its pass done).
    expect(await leases()).toEqual([
      { name: 'cleanup', holder: expect.any(String), live: false, done: true },
      { name: 'watch-locks', holder: expect.any(String), live: false, done: true },
    ])
  })

  it("a killed pass's lease expires and the next pass takes it", { timeout: 180_000 }, async () => {
    const db = viaPooler()
    const s = await runSetup(fleetYaml(server.url))
    expect((await s.run(['fleet', '--json'], db)).code).toBe(0) // the tables exist
    // The pass is held mid-way: its read of the jobs waits behind this lock, its lease taken and renewed.
    const blocker = new pg.Client({ connectionString: server.url })
    blocker.on('error', () => undefined)
    await blocker.connect()
    onTestFinished(() => blocker.end().catch(() => undefined))
    await blocker.query('BEGIN')
    await blocker.query('LOCK TABLE fleet_jobs IN ACCESS EXCLUSIVE MODE')
    const watcher = startWorkerless(s, db, ['watch-locks', '--interval', '1h'])
    const held = await until('the watcher holding the lease', async () =>
      (await leases()).find((l) => l.name === 'watch-locks' && l.holder.includes(`:${watcher.child.pid}:`)),
    )
    // Killed in its pass: it never releases the lease.
    watcher.child.kill('SIGKILL')
    await exitOf(watcher.child)
    await blocker.query('ROLLBACK')
    // The next passes: refused while the dead holder's lease lives (naming it), then one takes it.
    const refusals: string[] = []
    await until('a pass that ran', async () => {
      const pass = await s.run(['watch-locks', '--once'], db)
      expect(pass.code).toBe(0)
      if (pass.stderr === '') return true
      refusals.push(pass.stderr)
      return false
    })
    // Refused by the dead holder's lease (naming it), or, while its monitor lock on this host is not yet stale, by that.
    for (const r of refusals)
      expect([
        `ctxagent: warning: another host runs a watch-locks pass (${held.holder}); this one was skipped\n`,
        'ctxagent: warning: another watch-locks is running; this pass was skipped\n',
      ]).toContain(r)
    const after = (await leases()).find((l) => l.name === 'watch-locks')
    expect(after).toMatchObject({ live: false, done: true })
    expect(after?.holder).not.toBe(held.holder)
  })

  it('a pass refused its lease for longer than its interval fails loudly, and stats --check alerts', { timeout: 120_000 }, async () => {
    const db = viaPooler()
    const s = await runSetup(fleetYaml(server.url))
    expect((await s.run(['fleet', '--json'], db)).code).toBe(0)
    // A holder that is stuck: it renews its lease for ever (here: an hour ahead) and never finishes.
    await queryRows(
      server.url,
      `INSERT INTO fleet_leases (name, holder, expires_at) VALUES ('watch-locks', 'stuck:7:abcd', now() + interval '1 hour')
      ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at, denied_since = NULL`,
    )
    const first = await s.run(['watch-locks', '--once', '--interval', '1s'], db)
    expect(first).toMatchObject({ code: 0, stderr: 'ctxagent: warning: another host runs a watch-locks pass (stuck:7:abcd); this one was skipped\n' })
    // The database's own clock passes the interval since that first refusal.
    await until(
      'a second since the first refusal',
      async () =>
        (
          await queryRows<{ over: boolean }>(
            server.url,
            `SELECT now() - denied_since > interval '1 second' AS over FROM fleet_leases WHERE name = 'watch-locks'`,
          )
        )[0]?.over === true,
    )
    const overdue = await s.run(['watch-locks', '--once', '--interval', '1s'], db)
    expect(overdue.code).toBe(1)
    expect(overdue.stderr.trim().split('\n')).toHaveLength(1)
    expect(overdue.stderr).toMatch(
      /^ctxagent: no watch-locks pass has run for \d+ s, longer than its interval: each is refused the fleet-wide lease, held by stuck:7:abcd since .* \(if that host is gone/,
    )
    const check = await s.run(['stats', '--check', '--json'], db)
    expect(check.code).toBe(2)
    expect((JSON.parse(check.stdout) as { alerts: { metric: string; level: string; message: string }[] }).alerts).toContainEqual(
      expect.objectContaining({ metric: 'pass_lease', level: 'critical', message: expect.stringContaining('no watch-locks pass has run for') }),
    )
    // The stuck holder ends: the next pass runs, and the alert is gone.
    await queryRows(server.url, `UPDATE fleet_leases SET expires_at = now() WHERE name = 'watch-locks'`)
    expect((await s.run(['watch-locks', '--once', '--interval', '1s'], db)).stderr).toBe('')
    const clear = JSON.parse((await s.run(['stats', '--check', '--json'], db)).stdout) as { alerts: { metric: string }[] }
    expect(clear.alerts.filter((a) => a.metric === 'pass_lease')).toEqual([])
  })
})

/** A long-running operator command (not a worker) with the fleet's URL. */
function startWorkerless(s: RunSetup, db: { CTXAGENT_DATABASE_URL: string }, args: string[]) {
  process.env.CTXAGENT_DATABASE_URL = db.CTXAGENT_DATABASE_URL
  try {
    return s.start(args)
  } finally {
    delete process.env.CTXAGENT_DATABASE_URL
  }
}
