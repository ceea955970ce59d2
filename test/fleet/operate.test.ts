import { randomUUID } from 'node:crypto'
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { createServer } from 'node:net'
import type { Socket } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import pg from 'pg'
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest'
import { finish, until } from '../helpers/fleet-hosts.js'
import { startWorker } from '../helpers/fleet-worker.js'
import { queryRows, startPostgres } from '../helpers/postgres.js'
import type { PgServer } from '../helpers/postgres.js'
import { cliAsync, ROOT } from '../helpers/run.js'
import { cliAuto } from '../helpers/in-process.js'
import { exitOf } from '../helpers/wait.js'
import { readTask, runSetup } from '../run/harness.js'

/** Operating a fleet (docs/contract.md §14.5): start-up against a database that is down, stops, JSON logs, setup. */
let server: PgServer
beforeAll(async () => {
  server = await startPostgres()
})
afterAll(async () => {
  await server?.stop()
})

const FLEET = 'locks:\n  heartbeat_seconds: 0.2\n  stale_after_seconds: 1\nfleet:\n  poll_seconds: 0.5\n'

/** The server SIGKILLed; started again by restartServer(), or at the test's end if the test did not. */
let down = false
async function killServer(): Promise<void> {
  await server.kill()
  down = true
  onTestFinished(restartServer)
}
async function restartServer(): Promise<void> {
  if (!down) return
  down = false
  await server.restart()
}

async function enqueueRow(spec: Record<string, unknown>): Promise<string> {
  const uuid = randomUUID()
  await queryRows(server.url, `INSERT INTO fleet_jobs (task_uuid, kind, spec) VALUES ($1, 'new', $2)`, [uuid, JSON.stringify(spec)])
  return uuid
}

async function job(uuid: string): Promise<{ state: string; outcome: string | null; error: string | null } | undefined> {
  return (
    await queryRows<{ state: string; outcome: string | null; error: string | null }>(
      server.url,
      'SELECT state, outcome, error FROM fleet_jobs WHERE task_uuid = $1',
      [uuid],
    )
  )[0]
}

describe('a worker started while PostgreSQL is down', () => {
  it('waits with backoff, then runs the jobs once the database is up; every line JSON with --log-format json', { timeout: 180_000 }, async () => {
    const s = await runSetup(FLEET)
    s.fake.fallback = () => finish
    expect((await s.run(['fleet', '--json'], { CTXAGENT_DATABASE_URL: server.url })).code).toBe(0)
    await killServer()
    const worker = startWorker(s, server.url, ['--log-format', 'json'])
    await until('two waits for the database', async () => (worker.err().match(/cannot be reached/g)?.length ?? 0) >= 2)
    expect(worker.child.exitCode).toBe(null)
    await restartServer()
    const uuid = (await s.run(['enqueue', '--task', 'after the outage', '--workspace', s.ws], { CTXAGENT_DATABASE_URL: server.url })).stdout.trim()
    await until('the task completed', async () => (await job(uuid))?.outcome === 'completed')
    expect(readTask(s.tree, uuid).location).toBe('completed')
    worker.child.kill('SIGTERM')
    expect(await exitOf(worker.child)).toMatchObject({ code: 0 })
    const lines = worker.err().trim().split('\n')
    for (const line of lines) expect(() => JSON.parse(line) as unknown, line).not.toThrow()
    const records = lines.map((l) => JSON.parse(l) as { level?: string; msg?: string; uuid?: string })
    expect(records.every((r) => typeof r === 'object' && r !== null && !Array.isArray(r))).toBe(true)
    expect(records).toContainEqual(expect.objectContaining({ level: 'warn', msg: expect.stringContaining("the fleet's database cannot be reached") }))
    expect(records).toContainEqual(expect.objectContaining({ msg: expect.stringContaining('started on') }))
    // Its task's own log lines are among them.
    expect(records.some((r) => r.uuid === uuid)).toBe(true)
    expect(records.at(-1)).toMatchObject({ level: 'info', msg: 'stopped' })
  })

  it('a stop while it waits for the database ends it at once, exit 0', { timeout: 120_000 }, async () => {
    const s = await runSetup(FLEET)
    await killServer()
    const worker = startWorker(s, server.url)
    await until('a wait for the database', async () => /cannot be reached/.test(worker.err()))
    worker.child.kill('SIGTERM')
    expect(await exitOf(worker.child)).toMatchObject({ code: 0 })
    expect(worker.err()).toContain('ctxagent worker: stopped before it started')
    await restartServer()
  })

  it('a SIGTERM while its first connection hangs ends it with exit 0, not by the signal', { timeout: 120_000 }, async () => {
    const s = await runSetup(FLEET)
    // A server that takes the connection and never answers: the worker is inside its start-up.
    const sockets: Socket[] = []
    let connected: () => void = () => undefined
    const reached = new Promise<void>((resolve) => (connected = resolve))
    const silent = createServer((socket) => {
      sockets.push(socket)
      connected()
    })
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve))
    onTestFinished(() => {
      for (const socket of sockets) socket.destroy()
      silent.close()
    })
    const port = (silent.address() as { port: number }).port
    const worker = startWorker(s, `postgres://postgres@127.0.0.1:${port}/nothing`)
    await reached
    worker.child.kill('SIGTERM')
    const exit = await exitOf(worker.child)
    expect(exit).toMatchObject({ code: 0, signal: null })
  })

  it('a refusal that stays (no such database) is one line and exit 1, not a wait', { timeout: 60_000 }, async () => {
    const s = await runSetup(FLEET)
    const url = new URL(server.adminUrl)
    url.pathname = '/no_such_database'
    const worker = startWorker(s, url.toString())
    const exit = await exitOf(worker.child)
    expect(exit.code).toBe(1)
    expect(worker.err()).toMatch(/^ctxagent: cannot reach the fleet's database \(database "no_such_database" does not exist.*\n$/)
  })
})

describe('a worker refuses the jobs its own configuration cannot serve', () => {
  it('a --repo job without fleet.workspaces_dir, a --github job without a token, a shell without a working sandbox: each failed with its reason', {
    timeout: 180_000,
  }, async () => {
    const s = await runSetup(`${FLEET}tools:\n  shell: true\n`)
    s.fake.fallback = () => finish
    expect((await s.run(['fleet', '--json'], { CTXAGENT_DATABASE_URL: server.url })).code).toBe(0)
    const repo = await enqueueRow({ task: 'fix it', repo: 'https://example.invalid/owner/repo.git' })
    const github = await enqueueRow({ github: 'owner/repo#1' })
    const shell = await enqueueRow({ task: 'run the tests', workspace: s.ws })
    // A sandbox that cannot work here: its binary is missing.
    process.env.CTXAGENT_BWRAP = '/nonexistent/bwrap'
    process.env.GITHUB_TOKEN = ''
    let worker: ReturnType<typeof startWorker>
    try {
      worker = startWorker(s, server.url)
    } finally {
      delete process.env.CTXAGENT_BWRAP
      delete process.env.GITHUB_TOKEN
    }
    for (const uuid of [repo, github, shell]) await until(`job of ${uuid} ended`, async () => (await job(uuid))?.state === 'failed')
    expect(await job(repo)).toMatchObject({ state: 'failed', outcome: 'failed', error: expect.stringContaining('no fleet.workspaces_dir') })
    expect(await job(github)).toMatchObject({ state: 'failed', outcome: 'failed', error: expect.stringContaining('no GitHub token') })
    expect(await job(shell)).toMatchObject({ state: 'failed', outcome: 'failed', error: expect.stringMatching(/tools\.shell.*sandbox does not work here/) })
    // Nothing was cloned into the worker's current directory, and no task was begun.
    expect(existsSync(join(ROOT, repo))).toBe(false)
    for (const uuid of [repo, github, shell])
      for (const l of ['running', 'paused', 'completed'] as const) expect(existsSync(s.tree.layout.taskDir(l, uuid))).toBe(false)
    worker.child.kill('SIGTERM')
    expect((await exitOf(worker.child)).code).toBe(0)
  })
})

describe('a fleet from nothing', () => {
  it('fleet init names each missing right, creates the schema once granted; reindex makes the tree; doctor reports the fleet', {
    timeout: 180_000,
  }, async () => {
    const admin = new pg.Client({ connectionString: server.adminUrl })
    admin.on('error', () => undefined)
    await admin.connect()
    onTestFinished(() => admin.end().catch(() => undefined))
    const name = `fresh_${process.pid}`
    await admin.query(`CREATE ROLE ${name} LOGIN`)
    await admin.query(`CREATE DATABASE ${name}`)
    const url = new URL(server.adminUrl)
    url.username = name
    url.pathname = `/${name}`
    const s = await runSetup(FLEET)
    // PostgreSQL 15+: a role that owns nothing may not create tables in public.
    const refused = await s.run(['fleet', 'init', '--database-url', url.toString()])
    expect(refused.code).toBe(1)
    expect(refused.stdout).toContain(`missing: create tables: role ${name} may not create tables in database ${name}`)
    expect(refused.stderr).toBe(
      'ctxagent: the role lacks 1 right(s) the fleet needs: create tables (grant them (listed above) and run ctxagent fleet init again)\n',
    )
    const db = new pg.Client({ connectionString: `${server.adminUrl.replace(/\/postgres$/, '')}/${name}` })
    db.on('error', () => undefined)
    await db.connect()
    await db.query(`GRANT CREATE ON SCHEMA public TO ${name}`)
    await db.end()
    const made = await s.run(['fleet', 'init', '--json', '--database-url', url.toString()])
    expect(made.stderr).toBe('')
    expect(made.code).toBe(0)
    const report = JSON.parse(made.stdout) as { schema_version: number; was: number; rights: { right: string; ok: boolean; detail: string }[] }
    expect(report).toMatchObject({ was: 0 })
    expect(report.schema_version).toBeGreaterThan(0)
    expect(report.rights.map((r) => r.right)).toEqual(['create tables', 'use the tables', 'LISTEN', 'NOTIFY', 'wake-ups'])
    expect(report.rights.every((r) => r.ok)).toBe(true)
    // Failure text only where a check failed.
    expect(report.rights.map((r) => r.detail)).toEqual(['', '', '', '', ''])
    // A second run finds it done.
    expect((await s.run(['fleet', 'init', '--database-url', url.toString()])).stdout).toContain(`schema version ${report.schema_version}: up to date`)
    // A fleet's first reindex makes the shared tree.
    const home = join(mkdtempSync(join(tmpdir(), 'ctxagent-fleet-home-')), 'tree')
    onTestFinished(() => rmSync(join(home, '..'), { recursive: true, force: true }))
    const env = { CTXAGENT_DATABASE_URL: url.toString() }
    const reindex = await cliAuto(['reindex', '--home', home, '--config', s.config], env)
    expect(reindex.code).toBe(0)
    for (const dir of ['running', 'paused', 'completed']) expect(existsSync(join(home, dir))).toBe(true)
    // doctor's fleet line: reachable, the schema's version, no live worker yet, no workspaces_dir.
    const doctor = await cliAsync(['doctor', '--json', '--home', home, '--config', s.config], env)
    const fleet = (JSON.parse(doctor.stdout) as { checks: { name: string; status: string; message: string }[] }).checks.find((c) => c.name === 'fleet')
    expect(fleet).toEqual({
      name: 'fleet',
      status: 'warn',
      message: `database reachable, schema version ${report.schema_version}, 0 live worker(s), no fleet.workspaces_dir (--repo jobs are refused)`,
      hint: expect.any(String),
    })
    // fleet.workspaces_dir set, and missing: a failure.
    const config = join(home, '..', 'config.yaml')
    writeFileSync(config, readFileSync(s.config, 'utf8').replace('fleet:\n', `fleet:\n  workspaces_dir: ${join(home, 'no-such-dir')}\n`))
    const missing = JSON.parse((await cliAsync(['doctor', '--json', '--home', home, '--config', config], env)).stdout) as {
      checks: { name: string; status: string; message: string }[]
    }
    expect(missing.checks.find((c) => c.name === 'fleet')).toMatchObject({ status: 'fail', message: expect.stringContaining('no-such-dir does not exist') })
  })
})
