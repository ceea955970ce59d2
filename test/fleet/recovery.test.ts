import { spawn, spawnSync } from 'node:child_process'
import { describe, expect, it, onTestFinished } from 'vitest'
import { canUnshare, FAST_LOCKS, finish, onHost as workerOnHost, until } from '../helpers/fleet-hosts.js'
import type { Host } from '../helpers/fleet-hosts.js'
import { BIN } from '../helpers/run.js'
import { exitOf } from '../helpers/wait.js'
import { usePostgres } from '../helpers/use-postgres.js'
import { startWorker } from '../helpers/fleet-worker.js'
import { fleetJobs } from '../helpers/fleet-jobs.js'
import { agentRequests, expectContinuousSeq, readTask, runSetup } from '../run/harness.js'
import type { RunSetup } from '../run/harness.js'

const database = usePostgres()
const query = database.query

/** A worker on a simulated host `name` (test/helpers/fleet-hosts.ts). */
function onHost(s: RunSetup, name: string): Host {
  return workerOnHost(s, database.server.url, name)
}

/** Two turns per task: look around first, then finish; decided from the request itself, so replies never cross tasks. */
const twoTurns = (req: { body: { messages: { role: string }[]; tools?: unknown } }) =>
  req.body.messages.some((m) => m.role === 'tool') ? finish : { calls: [{ name: 'glob', arguments: { pattern: '*.js' } }] }

function expectExactlyOnce(s: RunSetup, uuids: string[]): void {
  for (const uuid of uuids) {
    const task = readTask(s.tree, uuid)
    expect(task.location).toBe('completed')
    expect(task.state.status).toBe('completed')
    expectContinuousSeq(task.messages)
    expect(task.tools.filter((t) => t.tool_name === 'finish')).toHaveLength(1)
    expect(task.messages.filter((m) => m.role === 'user')).toHaveLength(1)
  }
}

describe('a fleet on one host', () => {
  it('PostgreSQL SIGKILLed and restarted mid-run: nothing lost, nothing run twice, the index equal to the tree', { timeout: 180_000 }, async () => {
    const s = await runSetup(FAST_LOCKS)
    const db = { CTXAGENT_DATABASE_URL: database.server.url }
    await query('TRUNCATE fleet_jobs, fleet_workers, tasks').catch(() => undefined)
    // The database is killed while a task waits for its LLM reply (the 5th request: the third task under way),
    // so that tasks are certainly running through the outage.
    let killed: Promise<void> | null = null
    let down = false
    let answeredWhileDown = 0
    let requests = 0
    s.fake.fallback = (req) => {
      if (Array.isArray(req.body.tools) && ++requests === 5) {
        killed = database.server.kill().then(() => {
          down = true
        })
        return { delayMs: 300, ...twoTurns(req) }
      }
      if (down) answeredWhileDown++
      return { delayMs: 20, ...twoTurns(req) }
    }
    onTestFinished(async () => {
      if (killed !== null && down) await database.server.restart().catch(() => undefined)
    })
    const uuids: string[] = []
    for (let i = 0; i < 8; i++) uuids.push((await s.run(['enqueue', '--task', `task ${i}`, '--workspace', s.ws], db)).stdout.trim())
    const worker = startWorker(s, database.server.url, ['--concurrency', '2'])
    // Tasks under way keep working on the tree while the database is away.
    await until('an LLM turn while the database is down', async () => answeredWhileDown >= 1).catch((err) => {
      throw new Error(`${(err as Error).message}; ${requests} requests; worker said:\n${worker.err().slice(-3000)}`)
    })
    down = false
    await database.server.restart()
    const jobs = await until('every job done', async () => {
      const rows = await fleetJobs(database)
      return rows.length === 8 && rows.every((r) => r.state === 'done') ? rows : null
    }).catch(async (err) => {
      throw new Error(
        `${(err as Error).message}: ${JSON.stringify(await query('SELECT id, state, outcome, claimed_by FROM fleet_jobs ORDER BY id').catch((e: Error) => e.message))}; worker said:\n${worker
          .err()
          .replace(/^\{.*\n/gm, '')
          .slice(-3000)}`,
      )
    })
    expect(jobs.map((j) => j.task_uuid)).toEqual(uuids)
    expect(
      jobs.map((j) => j.outcome),
      worker.err().replace(/^\{.*\n/gm, ''),
    ).toEqual(uuids.map(() => 'completed'))
    expectExactlyOnce(s, uuids)
    expect(agentRequests(s.fake)).toHaveLength(16)
    worker.child.kill('SIGTERM')
    expect((await exitOf(worker.child)).code).toBe(0)
    // Index writes made while it was down were retried: PostgreSQL's index says what the tree says.
    const rows = await query<{ uuid: string; status: string; location: string }>('SELECT uuid, status, location FROM tasks ORDER BY uuid')
    expect(rows).toEqual([...uuids].sort().map((uuid) => ({ uuid, status: 'completed', location: 'completed' })))
  })
})

describe.runIf(canUnshare)('a fleet on two simulated hosts', () => {
  const TASKS = 24

  // 24 tasks: enough for every worker to take several and both hosts to meet on the queue; the
  // fleet at scale (300 tasks, with chaos) is torture/fleet's, under npm run torture.
  it(`3 workers on 2 hosts run ${TASKS} tasks: each completed exactly once, seq continuous, the index equal to the tree`, { timeout: 300_000 }, async () => {
    const s = await runSetup(FAST_LOCKS)
    await query('TRUNCATE fleet_jobs, fleet_workers, tasks').catch(() => undefined)
    s.fake.fallback = twoTurns
    const env = { ...process.env, CTXAGENT_DATABASE_URL: database.server.url, CTXAGENT_HOME: '', CTXAGENT_CONFIG: '', NO_COLOR: '1' }
    const worker = [process.execPath, BIN, 'worker', '--home', s.tree.base, '--config', s.config, '--concurrency', '2']
    // Host a runs two workers side by side; host b one.
    const a = spawn('unshare', ['--uts', '--pid', '--fork', '--mount-proc', 'sh', '-c', 'hostname "$0"; "$@" & "$@" & wait', 'fleet-a', ...worker], {
      env,
      stdio: ['ignore', 'ignore', 'pipe'],
    })
    const b = onHost(s, 'fleet-b')
    let errA = ''
    a.stderr?.on('data', (d: Buffer) => (errA += d.toString()))
    const aShell = () =>
      Number(
        spawnSync('ps', ['-o', 'pid=', '--ppid', String(a.pid)])
          .stdout.toString()
          .trim(),
      )
    const aWorkers = () =>
      spawnSync('ps', ['-o', 'pid=', '--ppid', String(aShell())])
        .stdout.toString()
        .trim()
        .split(/\s+/)
        .map(Number)
        .filter((p) => p > 0)
    onTestFinished(() => {
      for (const pid of [aShell()]) if (pid > 0) process.kill(pid, 'SIGKILL')
    })
    await until('three workers', async () => (errA.match(/started on fleet-a/g) ?? []).length === 2 && b.err().includes('started on fleet-b'))
    const uuids: string[] = []
    for (let i = 0; i < TASKS; i++) {
      const res = await s.run(['enqueue', '--task', `task ${i}`, '--workspace', s.ws], { CTXAGENT_DATABASE_URL: database.server.url })
      expect(res.code, res.stderr).toBe(0)
      uuids.push(res.stdout.trim())
    }
    const jobs = await until(`${TASKS} jobs done`, async () => {
      const rows = await query<{ task_uuid: string; outcome: string; claimed_by: string }>(
        `SELECT task_uuid, outcome, claimed_by FROM fleet_jobs WHERE state = 'done'`,
      )
      return rows.length === TASKS ? rows : null
    })
    expect(new Set(jobs.map((j) => j.task_uuid))).toEqual(new Set(uuids))
    expect(jobs.every((j) => j.outcome === 'completed')).toBe(true)
    // Both hosts took part.
    expect(new Set(jobs.map((j) => j.claimed_by.split(':')[0]))).toEqual(new Set(['fleet-a', 'fleet-b']))
    expectExactlyOnce(s, uuids)
    expect(agentRequests(s.fake)).toHaveLength(2 * TASKS)
    for (const pid of aWorkers()) process.kill(pid, 'SIGTERM')
    process.kill(b.workerPid(), 'SIGTERM')
    await exitOf(a)
    expect((await exitOf(b.unshare)).code).toBe(0)
    // The index equals the tree: stats from PostgreSQL and from a scan agree, and each row says where its task is.
    const fromPg = await s.run(['stats', '--json'], { CTXAGENT_DATABASE_URL: database.server.url })
    const scanned = await s.run(['stats', '--json'])
    // (The spend per user per day is the index's own: a scan has none to report.)
    const { spend: _spend, ...fromIndex } = JSON.parse(fromPg.stdout) as { spend?: unknown }
    expect(fromIndex).toEqual(JSON.parse(scanned.stdout))
    expect(await query('SELECT count(*)::int AS n FROM tasks WHERE status = $1 AND location = $1', ['completed'])).toEqual([{ n: TASKS }])
  })

  it('a host lost mid-task (its worker and agent SIGKILLed): watch-locks pauses the task and queues its resume, and the other host completes it exactly', {
    timeout: 180_000,
  }, async () => {
    const s = await runSetup(FAST_LOCKS)
    await query('TRUNCATE fleet_jobs, fleet_workers, tasks').catch(() => undefined)
    let n = 0
    s.fake.fallback = () => ({ calls: [{ name: 'glob', arguments: { pattern: `*${n++}*` } }] })
    const a = onHost(s, 'fleet-a')
    await until('host a', async () => a.err().includes('started on fleet-a'))
    const res = await s.run(['enqueue', '--task', 'look around', '--workspace', s.ws], { CTXAGENT_DATABASE_URL: database.server.url })
    expect(res.code, res.stderr).toBe(0)
    const uuid = res.stdout.trim()
    await until('the task under way on host a', async () => agentRequests(s.fake).length >= 3)
    process.kill(a.workerPid(), 'SIGKILL')
    await exitOf(a.unshare)
    const before = readTask(s.tree, uuid)
    expect(before.location).toBe('running')
    expect(before.metadata.hostname).toBe('fleet-a')

    s.fake.fallback = () => finish
    const b = onHost(s, 'fleet-b')
    await until('host b', async () => b.err().includes('started on fleet-b'))
    // watch-locks from a third host (this one) until it has judged host a's agent dead.
    await until('the dead task recovered', async () => {
      await s.run(['watch-locks', '--once'], { CTXAGENT_DATABASE_URL: database.server.url })
      return (await query<{ outcome: string }>('SELECT outcome FROM fleet_jobs WHERE id = (SELECT min(id) FROM fleet_jobs)'))[0]?.outcome === 'died'
    })
    await until('the resume completed', async () => readTask(s.tree, uuid).state.status === 'completed')
    const task = readTask(s.tree, uuid)
    expect(task.state).toMatchObject({ status: 'completed' })
    expectContinuousSeq(task.messages)
    expect(task.messages.length).toBeGreaterThan(before.messages.length)
    const jobs = await until('both jobs done', async () => {
      const rows = await fleetJobs(database)
      return rows.every((r) => r.state === 'done') ? rows : null
    })
    expect(jobs.map((j) => [j.kind, j.outcome, j.claimed_by?.split(':')[0]])).toEqual([
      ['new', 'died', 'fleet-a'],
      ['resume', 'completed', 'fleet-b'],
    ])
    expect(await query('SELECT status, location FROM tasks WHERE uuid = $1', [uuid])).toEqual([{ status: 'completed', location: 'completed' }])
    process.kill(b.workerPid(), 'SIGTERM')
    expect((await exitOf(b.unshare)).code).toBe(0)
  })

  it('an agent frozen (SIGSTOP) past the stale time is recovered on the other host; woken (SIGCONT), it writes nothing more', {
    timeout: 180_000,
  }, async () => {
    const s = await runSetup(FAST_LOCKS)
    await query('TRUNCATE fleet_jobs, fleet_workers, tasks').catch(() => undefined)
    let n = 0
    s.fake.fallback = () => ({ calls: [{ name: 'glob', arguments: { pattern: `*${n++}*` } }] })
    const a = onHost(s, 'fleet-a')
    await until('host a', async () => a.err().includes('started on fleet-a'))
    const uuid = (
      await s.run(['enqueue', '--task', 'look around', '--workspace', s.ws, '--max-turns', '1000000'], { CTXAGENT_DATABASE_URL: database.server.url })
    ).stdout.trim()
    await until('the task under way on host a', async () => agentRequests(s.fake).length >= 3)
    // The worker's child that runs the task (`run --uuid`), not the warm child waiting for the next job (docs/contract.md §14.2),
    // nor a zombie: the worker is PID 1 of the simulated host, so orphans of the sandbox's probe are reparented to it.
    const agent = Number(
      spawnSync('ps', ['-o', 'pid=,args=', '--ppid', String(a.workerPid())])
        .stdout.toString()
        .trim()
        .split('\n')
        .find((line) => line.includes(' run --uuid '))
        ?.trim()
        .split(/\s+/)[0],
    )
    expect(agent).toBeGreaterThan(0)
    process.kill(agent, 'SIGSTOP')
    onTestFinished(() => {
      try {
        process.kill(agent, 'SIGKILL')
      } catch {
        // gone
      }
    })
    s.fake.fallback = () => finish
    const b = onHost(s, 'fleet-b')
    await until('the frozen task recovered', async () => {
      await s.run(['watch-locks', '--once'], { CTXAGENT_DATABASE_URL: database.server.url })
      return (await query<{ outcome: string }>('SELECT outcome FROM fleet_jobs WHERE id = (SELECT min(id) FROM fleet_jobs)'))[0]?.outcome === 'died'
    })
    await until('the resume completed on host b', async () => readTask(s.tree, uuid).state.status === 'completed')
    const done = readTask(s.tree, uuid)
    const files = JSON.stringify([done.messages, done.state, done.tools])
    process.kill(agent, 'SIGCONT')
    await until('the woken agent to exit', async () => spawnSync('ps', ['-o', 'pid=', '-p', String(agent)]).status !== 0)
    const after = readTask(s.tree, uuid)
    expect(JSON.stringify([after.messages, after.state, after.tools])).toBe(files)
    expect(after.location).toBe('completed')
    expectContinuousSeq(after.messages)
    const jobs = await until('both jobs ended', async () => {
      const rows = await fleetJobs(database)
      return rows.every((r) => r.state === 'done') ? rows : null
    })
    expect(jobs.map((j) => [j.outcome, j.claimed_by?.split(':')[0]])).toEqual([
      ['died', 'fleet-a'],
      ['completed', 'fleet-b'],
    ])
    for (const host of [a, b]) process.kill(host.workerPid(), 'SIGTERM')
    expect((await exitOf(b.unshare)).code).toBe(0)
    expect((await exitOf(a.unshare)).code).toBe(0)
  })
})
