import { chmodSync, mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, expect, it, onTestFinished } from 'vitest'
import { FAST_LOCKS, finish, until } from '../helpers/fleet-hosts.js'
import { fleetJobs } from '../helpers/fleet-jobs.js'
import { enqueue, startWorker, stopCleanly } from '../helpers/fleet-worker.js'
import { usePostgres } from '../helpers/use-postgres.js'
import { readTask, runSetup } from '../run/harness.js'
import { makeOrigin } from '../workspace/repo.js'

/*
 * An `enqueue --repo` job goes through the same preparation as `run` (docs/environments.md):
 * a real worker on PostgreSQL clones the repository into fleet.workspaces_dir, its task runs
 * the environment's setup once, and its first LLM request carries the default branch's
 * AGENTS.md and the note that the environment is ready.
 */
const database = usePostgres({ truncate: ['fleet_jobs', 'fleet_workers', 'tasks'] })

describe('an enqueue --repo job', () => {
  it("runs the environment's setup once in the worker's clone and gives the base's instructions in its first request", { timeout: 180_000 }, async () => {
    const workspaces = mkdtempSync(join(tmpdir(), 'ctxagent-workspaces-'))
    onTestFinished(() => rmSync(workspaces, { recursive: true, force: true }))
    chmodSync(workspaces, 0o755)
    const s = await runSetup(`${FAST_LOCKS}  workspaces_dir: ${workspaces}\ntools:\n  shell: true\n`)
    const setup = 'echo SETUP-RAN\nmkdir -p deps\necho "installed from $(cat deps.lock)" > deps/marker'
    const origin = makeOrigin({
      'deps.lock': 'v1\n',
      'AGENTS.md': '# Rules\n\nBASE-RULE: run make check before finishing.\n',
      '.ctxagent/environment.yml': `setup: |\n  ${setup.split('\n').join('\n  ')}\ncache:\n  paths: [deps]\n  key: [deps.lock]\ntest: cat deps/marker\n`,
    })
    s.fake.fallback = () => finish
    const uuid = await enqueue(s, database, ['--task', 'look at the project', '--repo', origin.bare])
    const worker = startWorker(s, database.server.url)
    const done = await until('the job done', async () => {
      const [job] = await fleetJobs(database)
      return job?.state === 'done' ? job : null
    })
    await stopCleanly(worker)
    expect(done).toMatchObject({ outcome: 'completed', task_uuid: uuid })
    const task = readTask(s.tree, uuid)
    expect(task.state).toMatchObject({
      status: 'completed',
      environment: { status: 'ready', cache: 'miss', restored: ['deps'], test: 'cat deps/marker', file: expect.stringContaining('origin/HEAD') },
      test_run: { command: 'cat deps/marker', exit_code: 0 },
    })
    const log = readFileSync(join(task.dir, 'setup.log'), 'utf8')
    expect(log.match(/SETUP-RAN/g)).toHaveLength(1)
    const first = s.fake.requests[0]?.body.messages ?? []
    expect(first[0]?.content).toContain('BASE-RULE: run make check before finishing.')
    expect(JSON.stringify(first)).toContain("The repository's environment is ready")
    expect(JSON.stringify(first)).not.toContain('SETUP-RAN')
  })
})
