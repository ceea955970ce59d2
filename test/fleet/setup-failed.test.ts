import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, expect, it, onTestFinished } from 'vitest'
import { FAST_LOCKS, finish, until } from '../helpers/fleet-hosts.js'
import { startWorker, stopCleanly } from '../helpers/fleet-worker.js'
import { fleetJobs } from '../helpers/fleet-jobs.js'
import { usePostgres } from '../helpers/use-postgres.js'
import { readTask, runSetup } from '../run/harness.js'
import { makeOrigin } from '../workspace/repo.js'

/*
 * A fleet job whose task ended setup_failed (docs/environments.md#in-a-fleet) through a real
 * worker and PostgreSQL: retried by fleet.retry as the environment's failure (its history's
 * reason setup_failed, a new task each attempt, the failed one kept), never an agent
 * failure; it completes once setup passes. The setup fails until the test opens a barrier.
 */
const database = usePostgres({ truncate: ['fleet_jobs', 'fleet_workers', 'tasks'] })

describe('a job whose setup failed', () => {
  it('is retried by fleet.retry as an environment failure, with a new task, and completes once setup passes; jobs show says so', {
    timeout: 240_000,
  }, async () => {
    const barrier = mkdtempSync(join(tmpdir(), 'ctxagent-barrier-'))
    onTestFinished(() => rmSync(barrier, { recursive: true, force: true }))
    chmodSync(barrier, 0o755)
    const retry = '  retry:\n    base_seconds: 0.1\n    max_seconds: 0.5\n    max_attempts: 50\n'
    const s = await runSetup(`${FAST_LOCKS}${retry}tools:\n  shell: true\n  sandbox_read_only: [${barrier}]\n`)
    const setup = `if [ ! -e ${barrier}/go ]; then echo REGISTRY-UNREACHABLE >&2; exit 3; fi; mkdir -p deps; cat deps.lock > deps/marker`
    const origin = makeOrigin({ 'deps.lock': 'v1\n', '.ctxagent/environment.yml': `setup: |\n  ${setup}\ncache:\n  paths: [deps]\n  key: [deps.lock]\n` })
    s.fake.fallback = () => finish
    const db = { CTXAGENT_DATABASE_URL: database.server.url }
    const queued = await s.run(['enqueue', '--task', 'look', '--workspace', origin.clone()], db)
    expect(queued.code, queued.stderr).toBe(0)
    const first = queued.stdout.trim()
    const worker = startWorker(s, database.server.url)
    // At least one attempt ended setup_failed and the job runs again: as the environment's failure.
    const retrying = await until('the job retried after a failed setup', async () => {
      const [job] = await fleetJobs(database)
      return job !== undefined && job.attempts >= 1 && job.outcome === 'setup_failed' && job.task_uuid !== first ? job : null
    })
    expect(retrying.error).toMatch(/^environment setup failed: .*setup exited with 3/)
    expect(s.fake.requests).toHaveLength(0)
    const failedTask = readTask(s.tree, first)
    expect(failedTask).toMatchObject({ location: 'completed', state: { status: 'setup_failed' } })
    writeFileSync(join(barrier, 'go'), '')
    const done = await until('the job done', async () => {
      const [job] = await fleetJobs(database)
      return job?.state === 'done' ? job : null
    })
    await stopCleanly(worker)
    expect(done.outcome).toBe('completed')
    expect(readTask(s.tree, done.task_uuid).state).toMatchObject({ status: 'completed', environment: { status: 'ready', cache: 'miss' } })
    const shown = await s.run(['jobs', 'show', String(done.id), '--json'], db)
    expect(shown.code, shown.stderr).toBe(0)
    const history = (JSON.parse(shown.stdout) as { history: { reason: string; outcome: string; again: boolean }[] }).history
    expect(history.length).toBeGreaterThanOrEqual(2)
    for (const a of history.slice(0, -1)) expect(a).toMatchObject({ reason: 'setup_failed', outcome: 'setup_failed', again: true })
    expect(history.at(-1)).toMatchObject({ reason: 'completed', again: false })
    const human = await s.run(['jobs', 'show', String(done.id)], db)
    expect(human.stdout).toContain('setup_failed')
  })
})
