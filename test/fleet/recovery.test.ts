import { spawn, spawnSync } from 'node:child_process'
import type { ChildProcess } from 'node:child_process'
import pg from 'pg'
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest'
import { BIN } from '../helpers/run.js'
import { exitOf } from '../helpers/wait.js'
import { startPostgres } from '../helpers/postgres.js'
import type { PgServer } from '../helpers/postgres.js'
import { agentRequests, expectContinuousSeq, readTask, runSetup } from '../run/harness.js'
import type { RunSetup } from '../run/harness.js'

/**
 * Hosts are simulated on this machine: each worker in a UTS namespace of its own (its
 * host name) and a PID namespace of its own (it cannot see the other host's pids, and
 * SIGKILL to its PID 1 ends everything on that "host" at once, as a crash would).
 */
const canUnshare = process.getuid?.() === 0 && spawnSync('unshare', ['--uts', '--pid', '--fork', 'true']).status === 0

let server: PgServer
beforeAll(async () => {
  server = await startPostgres()
})
afterAll(async () => {
  await server?.stop()
})

async function query<T extends pg.QueryResultRow>(sql: string, params: unknown[] = []): Promise<T[]> {
  const client = new pg.Client({ connectionString: server.url })
  client.on('error', () => undefined)
  await client.connect()
  try {
    return (await client.query<T>(sql, params)).rows
  } finally {
    await client.end()
  }
}

async function until<T>(what: string, probe: () => Promise<T | null | undefined | false>): Promise<T> {
  for (let i = 0; ; i++) {
    const value = await probe().catch(() => null)
    if (value) return value
    if (i > 1200) throw new Error(`timed out waiting for ${what}`)
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
}

const FAST_LOCKS = 'locks:\n  heartbeat_seconds: 0.2\n  stale_after_seconds: 1\nfleet:\n  poll_seconds: 0.5\n'
const finish = { calls: [{ name: 'finish', arguments: { summary: 'done', status: 'done' } }] }

interface Host {
  unshare: ChildProcess
  err: () => string
  /** The worker's pid as this machine sees it (PID 1 of its namespace). */
  workerPid: () => number
}

function onHost(s: RunSetup, name: string): Host {
  const child = spawn('unshare', ['--uts', '--pid', '--fork', '--mount-proc', 'sh', '-c', 'hostname "$0" && exec "$@"', name, process.execPath, BIN, 'worker', '--home', s.tree.base, '--config', s.config], {
    env: { ...process.env, CTXAGENT_DATABASE_URL: server.url, CTXAGENT_HOME: '', CTXAGENT_CONFIG: '', NO_COLOR: '1' },
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  let err = ''
  child.stderr?.on('data', (d: Buffer) => (err += d.toString()))
  const workerPid = () => Number(spawnSync('ps', ['-o', 'pid=', '--ppid', String(child.pid)]).stdout.toString().trim())
  onTestFinished(() => {
    if (child.exitCode === null && child.signalCode === null) {
      const pid = workerPid()
      if (pid > 0) process.kill(pid, 'SIGKILL')
    }
  })
  return { unshare: child, err: () => err, workerPid }
}

describe.runIf(canUnshare)('a fleet on two simulated hosts', () => {
  it('a host lost mid-task (its worker and agent SIGKILLed): watch-locks pauses the task and queues its resume, and the other host completes it exactly', async () => {
    const s = await runSetup(FAST_LOCKS)
    let n = 0
    s.fake.fallback = () => ({ calls: [{ name: 'glob', arguments: { pattern: `*${n++}*` } }] })
    const a = onHost(s, 'fleet-a')
    await until('host a', async () => a.err().includes('started on fleet-a'))
    const res = await s.run(['enqueue', '--task', 'look around', '--workspace', s.ws], { CTXAGENT_DATABASE_URL: server.url })
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
      await s.run(['watch-locks', '--once'], { CTXAGENT_DATABASE_URL: server.url })
      return (await query<{ outcome: string }>('SELECT outcome FROM fleet_jobs WHERE id = (SELECT min(id) FROM fleet_jobs)'))[0]?.outcome === 'died'
    })
    await until('the resume completed', async () => readTask(s.tree, uuid).location === 'completed')
    const task = readTask(s.tree, uuid)
    expect(task.state).toMatchObject({ status: 'completed' })
    expectContinuousSeq(task.messages)
    expect(task.messages.length).toBeGreaterThan(before.messages.length)
    const jobs = await until('both jobs done', async () => {
      const rows = await query<{ kind: string; state: string; outcome: string; claimed_by: string }>('SELECT kind, state, outcome, claimed_by FROM fleet_jobs ORDER BY id')
      return rows.every((r) => r.state === 'done') ? rows : null
    })
    expect(jobs.map((j) => [j.kind, j.outcome, j.claimed_by.split(':')[0]])).toEqual([['new', 'died', 'fleet-a'], ['resume', 'completed', 'fleet-b']])
    expect(await query('SELECT status, location FROM tasks WHERE uuid = $1', [uuid])).toEqual([{ status: 'completed', location: 'completed' }])
    process.kill(b.workerPid(), 'SIGTERM')
    expect((await exitOf(b.unshare)).code).toBe(0)
  })
})
