import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, expect, it, onTestFinished } from 'vitest'
import { canUnshare, FAST_LOCKS, finish, onHost, until } from '../helpers/fleet-hosts.js'
import { fleetJobs } from '../helpers/fleet-jobs.js'
import { usePostgres } from '../helpers/use-postgres.js'
import { exitOf } from '../helpers/wait.js'
import { readTask, runSetup } from '../run/harness.js'
import { makeOrigin } from '../workspace/repo.js'

/*
 * One cache for the fleet (docs/environments.md#the-cache): two workers on two host names
 * (each in a UTS and pid namespace of its own), one fleet.workspaces_dir, two jobs of one
 * repository needing the same key at the same moment: setup runs once, on one host; the
 * other host's task waits for it and restores its result.
 */
const database = usePostgres({ truncate: ['fleet_jobs', 'fleet_workers', 'tasks'] })

describe.runIf(canUnshare)('the fleet shares one environment cache', () => {
  it('between two workers on two host names: setup runs once for both tasks', { timeout: 240_000 }, async () => {
    const shared = mkdtempSync(join(tmpdir(), 'ctxagent-shared-'))
    onTestFinished(() => rmSync(shared, { recursive: true, force: true }))
    chmodSync(shared, 0o755)
    const barrier = mkdtempSync(join(tmpdir(), 'ctxagent-barrier-'))
    onTestFinished(() => rmSync(barrier, { recursive: true, force: true }))
    chmodSync(barrier, 0o755)
    const s = await runSetup(`${FAST_LOCKS}  workspaces_dir: ${shared}\ntools:\n  shell: true\n  sandbox_read_only: [${barrier}]\n`)
    const setup = `echo SETUP-RAN\nwhile [ ! -e ${barrier}/go ]; do sleep 0.1; done\nmkdir -p deps\ncat deps.lock > deps/marker`
    const origin = makeOrigin({
      'deps.lock': 'v1\n',
      '.ctxagent/environment.yml': `setup: |\n  ${setup.split('\n').join('\n  ')}\ncache:\n  paths: [deps]\n  key: [deps.lock]\n`,
    })
    s.fake.fallback = () => finish
    const db = { CTXAGENT_DATABASE_URL: database.server.url }
    for (const task of ['one', 'two']) {
      const queued = await s.run(['enqueue', '--task', task, '--workspace', origin.clone()], db)
      expect(queued.code, queued.stderr).toBe(0)
    }
    const hosts = [onHost(s, database.server.url, 'host-a'), onHost(s, database.server.url, 'host-b')]
    // Both jobs claimed, one by each host, while the one setup waits at the barrier.
    await until('both jobs running', async () => (await fleetJobs(database)).filter((j) => j.state === 'running').length === 2)
    writeFileSync(join(barrier, 'go'), '')
    const done = await until('both jobs done', async () => {
      const jobs = await fleetJobs(database)
      return jobs.length === 2 && jobs.every((j) => j.state === 'done') ? jobs : null
    })
    for (const h of hosts) {
      process.kill(h.workerPid(), 'SIGTERM')
      await exitOf(h.unshare)
    }
    const claimedOn = await database.query<{ hostname: string }>('SELECT hostname FROM fleet_job_attempts ORDER BY hostname')
    expect(claimedOn.map((r) => r.hostname)).toEqual(['host-a', 'host-b'])
    const tasks = done.map((j) => readTask(s.tree, j.task_uuid))
    const caches = tasks.map((t) => (t.state.environment as { cache: string }).cache).sort()
    expect(caches).toEqual(['hit', 'miss'])
    const logs = tasks.map((t) => {
      try {
        return readFileSync(join(t.dir, 'setup.log'), 'utf8')
      } catch {
        return ''
      }
    })
    expect(logs.filter((l) => l.includes('SETUP-RAN'))).toHaveLength(1)
    for (const t of tasks) expect(t.state.environment).toMatchObject({ status: 'ready', restored: ['deps'] })
  })
})
