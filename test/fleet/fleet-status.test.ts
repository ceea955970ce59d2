import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { exitOf, until } from '../helpers/wait.js'
import { queryRows, startPostgres } from '../helpers/postgres.js'
import type { PgServer } from '../helpers/postgres.js'
import { startWorker } from '../helpers/fleet-worker.js'
import { agentRequests, runSetup } from '../run/harness.js'

let server: PgServer
beforeAll(async () => {
  server = await startPostgres()
})
afterAll(async () => {
  await server?.stop()
})

describe('ctxagent fleet and stats --check in a fleet', () => {
  it('shows workers, their tasks, jobs by state and the oldest waiting job; stats --check alerts on the queue', async () => {
    const s = await runSetup('alerts:\n  queue_wait_minutes: 0.0001\n')
    const db = { CTXAGENT_DATABASE_URL: server.url }
    expect(await s.run(['fleet'])).toMatchObject({
      code: 2,
      stderr: "ctxagent: fleet needs the fleet's PostgreSQL database (set fleet.database_url in the config, or CTXAGENT_DATABASE_URL)\n",
    })
    const first = (await s.run(['enqueue', '--task', 'one', '--workspace', s.ws], db)).stdout.trim()
    await s.run(['enqueue', '--task', 'two', '--workspace', s.ws, '--priority', '5'], db)
    const idle = JSON.parse((await s.run(['fleet', '--json'], db)).stdout) as Record<string, unknown>
    expect(idle).toMatchObject({ workers: [], jobs: { waiting: 2, running: 0, done: 0 }, outcomes: {}, oldest_waiting: { task_uuid: first } })
    // Jobs wait with no live worker: critical; and they have waited longer than queue_wait_minutes: a warning too.
    const check = await s.run(['stats', '--check', '--json'], db)
    expect(check.code).toBe(2)
    const alerts = (JSON.parse(check.stdout) as { alerts: { metric: string; level: string }[] }).alerts
    expect(alerts).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ metric: 'queue_no_worker', level: 'critical' }),
        expect.objectContaining({ metric: 'queue_wait', level: 'warning' }),
      ]),
    )

    let n = 0
    s.fake.fallback = () => ({ delayMs: 50, calls: [{ name: 'glob', arguments: { pattern: `*${n++}*` } }] })
    const worker = startWorker(s, server.url, ['--concurrency', '2'])
    const busy = await until('both jobs running', async () => {
      const status = JSON.parse((await s.run(['fleet', '--json'], db)).stdout) as {
        workers: { tasks: string[]; live: boolean; hostname: string; concurrency: number }[]
        jobs: { running: number }
      }
      return status.jobs.running === 2 ? status : null
    })
    // Both tasks have asked the model: SIGTERM now pauses two tasks (a job stopped before its task began waits again untouched).
    await until('both tasks at work', async () => {
      const asked = new Set(agentRequests(s.fake).map((r) => JSON.stringify(r.body.messages).match(/"(one|two)"/)?.[1]))
      return asked.has('one') && asked.has('two')
    })
    expect(busy.workers).toHaveLength(1)
    expect(busy.workers[0]).toMatchObject({ live: true, concurrency: 2 })
    expect(busy.workers[0]?.tasks).toHaveLength(2)
    const human = await s.run(['fleet'], db)
    expect(human.stdout).toContain('Workers: 1 live')
    expect(human.stdout).toContain('Jobs: 0 waiting, 2 running, 0 retrying, 0 done, 0 failed, 0 cancelled')
    expect(human.stdout).toContain('Oldest waiting job: none')
    worker.child.kill('SIGTERM')
    expect((await exitOf(worker.child)).code).toBe(0)
    const after = JSON.parse((await s.run(['fleet', '--json'], db)).stdout) as Record<string, unknown>
    expect(after).toMatchObject({ workers: [], jobs: { waiting: 2, running: 0, done: 2 }, outcomes: { paused: 2 } })
  })
})

describe('passes never overlap fleet-wide', () => {
  it('cleanup and watch-locks skip their pass while another host holds its lease, and run once it is free', async () => {
    const s = await runSetup()
    const db = { CTXAGENT_DATABASE_URL: server.url }
    expect((await s.run(['fleet', '--json'], db)).code).toBe(0) // the tables exist
    // Another host's passes under way: their leases live for an hour.
    await queryRows(
      server.url,
      `INSERT INTO fleet_leases (name, holder, expires_at) VALUES ('cleanup', 'other:1:x', now() + interval '1 hour'), ('watch-locks', 'other:1:x', now() + interval '1 hour')`,
    )
    const cleanup = await s.run(['cleanup'], db)
    expect(cleanup).toMatchObject({ code: 0, stderr: 'ctxagent: warning: another host runs cleanup (other:1:x); this one was skipped\n' })
    const watch = await s.run(['watch-locks', '--once'], db)
    expect(watch.code).toBe(0)
    expect(watch.stderr).toBe('ctxagent: warning: another host runs a watch-locks pass (other:1:x); this one was skipped\n')
    // The other host went away: its leases expire.
    await queryRows(server.url, `UPDATE fleet_leases SET expires_at = now() - interval '1 second'`)
    const again = await s.run(['cleanup'], db)
    expect(again.code).toBe(0)
    expect(again.stderr).toBe('')
    expect((await s.run(['watch-locks', '--once'], db)).stderr).toBe('')
  })
})
