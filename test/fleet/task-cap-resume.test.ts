import { writeFileSync } from 'node:fs'
import { describe, expect, it } from 'vitest'
import { fleetJobs } from '../helpers/fleet-jobs.js'
import { FAST_LOCKS, finish, until } from '../helpers/fleet-hosts.js'
import { startWorker, stopCleanly } from '../helpers/fleet-worker.js'
import { usePostgres } from '../helpers/use-postgres.js'
import { readTask, runSetup } from '../run/harness.js'

/**
 * docs/fleet-operations.md#waits and docs/fleet.md#enqueue: a task paused at its own cost cap
 * (run.max_cost_usd, which no window resets) is queued to resume. Refused by that cap, its job
 * ends at once with the task paused (not handed back to be refused again); queued again with a
 * raised cap (enqueue --resume --max-cost), it goes on to completion.
 */
const database = usePostgres({ schema: true, truncate: ['fleet_jobs', 'fleet_workers', 'tasks', 'fleet_job_attempts', 'user_spend'] })
const db = database.env

describe('a resume of a task paused at its own cost cap', () => {
  it('refused by the cap: the job ends, its task paused; with --max-cost raised it completes', { timeout: 240_000 }, async () => {
    const s = await runSetup()
    // Each request may cost 100 tokens at $1,000 per million: $0.10; each reply costs $0.02 (20 completion tokens). Under a
    // $0.15 cap three requests go ($0.06 spent), and a fourth, which may take it to $0.16, is not sent.
    writeFileSync(
      s.config,
      `${s.fake.configYaml(FAST_LOCKS).replace('llm:\n', 'llm:\n  max_output_tokens: 100\n')}pricing:\n  fake-model:\n    prompt: 0\n    completion: 1000\n`,
    )
    s.fake.fallback = () => ({ calls: [{ name: 'glob', arguments: { pattern: `*${s.fake.requests.length}*` } }] })
    const first = await s.run(['run', '--task', 'count the files', '--workspace', s.ws, '--max-cost', '0.15', '--json'])
    expect(first.code, first.stderr).toBe(5)
    const uuid = (JSON.parse(first.stdout) as { uuid: string }).uuid
    expect(readTask(s.tree, uuid)).toMatchObject({ location: 'paused', state: { paused_by: 'budget', budget_cap: 'task' } })
    expect(s.fake.requests).toHaveLength(3)
    s.fake.fallback = () => finish

    const worker = startWorker(s, database.server.url, ['--concurrency', '1'])
    expect((await s.run(['enqueue', '--resume', uuid], db())).code).toBe(0)
    const ended = await until('the resume job to end', async () => {
      const [job] = await fleetJobs(database)
      return job !== undefined && job.state !== 'waiting' && job.state !== 'running' ? job : null
    })
    // Ended once, the task as it was: not handed back (no second attempt), no request sent.
    expect(ended).toMatchObject({ state: 'done', outcome: 'paused', attempts: 1 })
    expect(ended.error).toMatch(/cost cap \(run\.max_cost_usd/)
    expect(readTask(s.tree, uuid).location).toBe('paused')
    expect(s.fake.requests).toHaveLength(3)
    const history = JSON.parse((await s.run(['jobs', 'show', String(ended.id), '--json'], db())).stdout) as { history: object[] }
    expect(history.history).toEqual([expect.objectContaining({ reason: 'budget', cap: 'task', again: false })])

    const raised = await s.run(['enqueue', '--resume', uuid, '--max-cost', '1', '--json'], db())
    expect(raised.code, raised.stderr).toBe(0)
    // Moved to completed/ while its status is still `completing`, then `completed` (docs/contract.md §3's order): both awaited.
    await until('the raised resume to complete', async () => {
      const task = readTask(s.tree, uuid)
      return task.location === 'completed' && task.state.status === 'completed'
    })
    expect(s.fake.requests.length).toBeGreaterThan(3)
    await stopCleanly(worker)
  })
})
