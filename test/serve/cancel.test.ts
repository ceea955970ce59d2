import { describe, expect, it } from 'vitest'
import { agentPid, FAST_LOCKS, until } from '../helpers/fleet-hosts.js'
import { startWorker, stopCleanly } from '../helpers/fleet-worker.js'
import { usePostgres } from '../helpers/use-postgres.js'
import { agentRequests, readTask, runSetup } from '../run/harness.js'
import { startServe, TOKEN } from './helpers.js'

const database = usePostgres({ truncate: ['fleet_jobs', 'fleet_workers', 'tasks'] })

describe("the fleet page's Cancel of a running job", () => {
  it('says "cancelled" only when the row says so: the answer waits for the worker to end the job, and the page shows them agreeing', {
    timeout: 240_000,
  }, async () => {
    const s = await runSetup(`${FAST_LOCKS}serve:\n  token: ${TOKEN}\n`)
    let n = 0
    s.fake.fallback = () => ({ calls: [{ name: 'glob', arguments: { pattern: `*${n++}*` } }] })
    const queued = await s.run(['enqueue', '--task', 'keep looking', '--workspace', s.ws, '--max-turns', '1000000'], database.env())
    expect(queued.code, queued.stderr).toBe(0)
    const uuid = queued.stdout.trim()
    const worker = startWorker(s, database.server.url)
    await until('the task under way', async () => agentRequests(s.fake).length >= 2 && agentPid(s, uuid) !== null)
    const [job] = await database.query<{ id: number }>('SELECT id::int FROM fleet_jobs')
    const served = await startServe(s.tree.base, { config: s.config, env: database.env() })
    // The page's form, posted as a script would (the bearer token instead of a session).
    const res = await served.get(`/jobs/${job?.id}/cancel?wait=60`, {
      method: 'POST',
      headers: { authorization: `Bearer ${TOKEN}`, 'x-ctxagent-operator': 'gina' },
    })
    expect(res.status).toBe(200)
    const page = await res.text()
    const [row] = await database.query<{ state: string; outcome: string }>('SELECT state, outcome FROM fleet_jobs WHERE id = $1', [job?.id])
    expect(row).toEqual({ state: 'cancelled', outcome: 'paused' })
    expect(page).toContain(`cancel: job ${job?.id} cancelled; its task paused`)
    expect(page).toContain(`<td class="n">${job?.id}</td><td>cancelled</td>`)
    expect(page).not.toContain('(cancelling)')
    expect(readTask(s.tree, uuid)).toMatchObject({ location: 'paused', state: { paused_by: 'operator' } })
    await stopCleanly(worker)
  })
})
