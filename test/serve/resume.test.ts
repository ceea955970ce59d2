import pg from 'pg'
import { describe, expect, it } from 'vitest'
import { JobQueue } from '../../src/fleet/queue/job-queue.js'
import { makeTree, uuidN } from '../fixtures/tree.js'
import { cliAuto } from '../helpers/in-process.js'
import { usePostgres } from '../helpers/use-postgres.js'
import { configWith, startServe, TOKEN } from './helpers.js'

const database = usePostgres({ schema: true, truncate: ['fleet_jobs'] })

/** One claim as a worker makes it, under fleet.limits.per_user = `perUser`. */
async function claim(perUser: number): Promise<{ task_uuid: string; user: string | null } | null> {
  const pool = new pg.Pool({ connectionString: database.server.url, max: 1 })
  try {
    return await new JobQueue(pool).claim('test-worker', perUser)
  } finally {
    await pool.end()
  }
}

describe('a resume queued from the page', () => {
  it("sent as a script sends it (the bearer token), queues the job enqueue --resume queues: with its task's user, counted by per_user", async () => {
    const tree = makeTree()
    const paused = uuidN(1)
    tree.write({ uuid: paused, user: 'alice', location: 'paused' })
    const other = uuidN(2)
    tree.write({ uuid: other, user: 'alice', location: 'paused' })
    const config = configWith(tree, `serve:\n  token: ${TOKEN}\n`)
    const s = await startServe(tree.base, { config, env: database.env() })
    const res = await s.get(`/api/tasks/${paused}/resume`, { method: 'POST', headers: { authorization: `Bearer ${TOKEN}`, 'x-ctxagent-operator': 'gina' } })
    expect(res.status, await res.clone().text()).toBe(200)
    const { job } = (await res.json()) as { job: number }
    // The same job the CLI queues for the other task.
    const cli = await cliAuto(['enqueue', '--resume', other, '--home', tree.base, '--config', config], database.env())
    expect(cli.code, cli.stderr).toBe(0)
    const rows = await database.query<{ id: number; task_uuid: string; kind: string; user: string | null; spec: unknown; state: string }>(
      'SELECT id::int, task_uuid, kind, "user", spec, state FROM fleet_jobs ORDER BY id',
    )
    expect(rows).toEqual([
      { id: job, task_uuid: paused, kind: 'resume', user: 'alice', spec: {}, state: 'waiting' },
      { id: expect.any(Number), task_uuid: other, kind: 'resume', user: 'alice', spec: {}, state: 'waiting' },
    ])
    // per_user 1: with one of alice's tasks running, her next waits (a job without a user would be claimed).
    expect(await claim(1)).toMatchObject({ task_uuid: paused, user: 'alice' })
    expect(await claim(1)).toBeNull()
    await database.query(`UPDATE fleet_jobs SET state = 'done', finished_at = now() WHERE id = $1`, [job])
    expect(await claim(1)).toMatchObject({ task_uuid: other, user: 'alice' })
  })

  it('is refused as enqueue --resume refuses it: a running task (409), and a second resume while the first waits (409)', async () => {
    const tree = makeTree()
    tree.write({ uuid: uuidN(3), user: 'bob', location: 'running' })
    tree.write({ uuid: uuidN(4), user: 'bob', location: 'paused' })
    const config = configWith(tree, `serve:\n  token: ${TOKEN}\n`)
    const s = await startServe(tree.base, { config, env: database.env() })
    const post = (uuid: string) => s.get(`/api/tasks/${uuid}/resume`, { method: 'POST', headers: { authorization: `Bearer ${TOKEN}` } })
    const running = await post(uuidN(3))
    expect(running.status).toBe(409)
    const cli = await cliAuto(['enqueue', '--resume', uuidN(3), '--home', tree.base, '--config', config], database.env())
    expect(`ctxagent: ${((await running.json()) as { error: string }).error}\n`).toBe(cli.stderr)
    expect((await post(uuidN(4))).status).toBe(200)
    expect((await post(uuidN(4))).status).toBe(409)
    expect(await database.query('SELECT task_uuid FROM fleet_jobs')).toEqual([{ task_uuid: uuidN(4) }])
  })
})
