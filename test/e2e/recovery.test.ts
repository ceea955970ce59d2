import { spawn } from 'node:child_process'
import { existsSync, mkdirSync, readdirSync, readFileSync, utimesSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import Database from 'better-sqlite3'
import { describe, expect, it } from 'vitest'
import { hostname, processStart } from '../../src/storage/fs/process-info.js'
import { makeTree, uuidN } from '../fixtures/tree.js'
import { cli, BIN, cliAsync, deadPid, helper, findingsText } from '../helpers/run.js'
import { cliIn } from '../helpers/in-process.js'
import { exitOf, lineFrom, sleep } from '../helpers/wait.js'

const ago = (ms: number) => new Date(Date.now() - ms).toISOString()
const UUID_LINE = /^[0-9a-f-]{36}$/

function state(dir: string) {
  return JSON.parse(readFileSync(join(dir, 'state.json'), 'utf8')) as Record<string, unknown>
}

describe('watch-locks', () => {
  it('reaps a SIGKILLed owner once stale-after has passed, and not before', async () => {
    const tree = makeTree()
    const owner = helper('owner.mjs', [tree.base])
    const uuid = (await lineFrom(owner, UUID_LINE)).trim()
    const pid = owner.pid as number
    owner.kill('SIGKILL')
    await exitOf(owner)

    const early = cli(['watch-locks', '--once', '--json', '--home', tree.base])
    expect(early.code).toBe(0)
    expect(findingsText(early.stdout).trim()).toBe('')
    expect(existsSync(tree.layout.taskDir('running', uuid))).toBe(true)

    // Past stale-after by the monitor's clock (CTXAGENT_NOW): no waiting, no margin.
    const late = cli(['watch-locks', '--once', '--json', '--stale-after', '1s', '--home', tree.base], {
      CTXAGENT_NOW: new Date(Date.now() + 5_000).toISOString(),
    })
    expect(late.code).toBe(0)
    const report = JSON.parse(findingsText(late.stdout)) as Record<string, unknown>
    expect(report).toMatchObject({ uuid, action: 'reaped', pid, hostname: hostname() })
    // recovery: resume (the default, one host as a fleet): paused to be resumed, the death recorded.
    const dir = tree.layout.taskDir('paused', uuid)
    expect(state(dir)).toMatchObject({ status: 'paused', paused_by: 'reaper', error: expect.stringContaining(`pid ${pid}`) })
    expect(existsSync(join(dir, '.lock'))).toBe(false)
    const db = new Database(join(tree.base, 'tasks.db'), { readonly: true })
    expect(db.prepare('SELECT status, location FROM tasks WHERE uuid = ?').get(uuid)).toEqual({ status: 'paused', location: 'paused' })
    db.close()
  })

  it('never reaps an owner that keeps its heartbeat, even past stale-after', async () => {
    const tree = makeTree()
    const owner = helper('owner.mjs', [tree.base, 'idle', '0.2'])
    const uuid = (await lineFrom(owner, UUID_LINE)).trim()
    await sleep(1500)
    const res = cli(['watch-locks', '--once', '--json', '--stale-after', '1s', '--home', tree.base])
    owner.kill('SIGKILL')
    await exitOf(owner)
    expect(findingsText(res.stdout).trim()).toBe('')
    expect(existsSync(tree.layout.taskDir('running', uuid))).toBe(true)
  })

  it('two monitors at once move each of 100 stale tasks exactly once', async () => {
    const tree = makeTree()
    const pid = deadPid()
    for (let i = 1; i <= 100; i++) {
      tree.write({
        uuid: uuidN(i),
        location: 'running',
        lock: { process_id: pid, hostname: hostname(), acquired_at: ago(600_000), heartbeat_at: ago(300_000) },
      })
    }
    const [a, b] = await Promise.all([
      cliAsync(['watch-locks', '--once', '--json', '--home', tree.base]),
      cliAsync(['watch-locks', '--once', '--json', '--home', tree.base]),
    ])
    const uuids = `${findingsText(a.stdout)}\n${findingsText(b.stdout)}`
      .replace(/\n+/g, '\n')
      .trim()
      .split('\n')
      .map((l) => (JSON.parse(l) as { uuid: string }).uuid)
    expect(uuids.sort()).toEqual(Array.from({ length: 100 }, (_, i) => uuidN(i + 1)).sort())
    expect(readdirSync(tree.layout.dir('running'))).toEqual([])
    expect(readdirSync(tree.layout.dir('paused'))).toHaveLength(100)
  })

  it('the per-task takeover alone keeps two concurrent reapers from acting twice', async () => {
    const tree = makeTree()
    const pid = deadPid()
    for (let i = 1; i <= 60; i++) {
      tree.write({
        uuid: uuidN(i),
        location: 'running',
        lock: { process_id: pid, hostname: hostname(), acquired_at: ago(600_000), heartbeat_at: ago(300_000) },
      })
    }
    const reapers = [helper('reap-pass.mjs', [tree.base]), helper('reap-pass.mjs', [tree.base])]
    const outs = reapers.map((r) => {
      let out = ''
      r.stdout.on('data', (d: Buffer) => (out += d.toString()))
      return () => out
    })
    await Promise.all(reapers.map(exitOf))
    const uuids = outs
      .map((o) => o())
      .join('')
      .trim()
      .split('\n')
      .map((l) => (JSON.parse(l) as { uuid: string }).uuid)
    expect(uuids).toHaveLength(60)
    expect(new Set(uuids).size).toBe(60)
    expect(readdirSync(tree.layout.dir('completed'))).toHaveLength(60)
  })

  it('reaps a live pid whose start time differs (reused), and a remote lock by heartbeat; keeps a future heartbeat', async () => {
    const tree = makeTree()
    tree.write({
      uuid: uuidN(1),
      location: 'running',
      lock: { process_id: process.pid, process_start: 'other', hostname: hostname(), acquired_at: ago(600_000), heartbeat_at: ago(300_000) },
    })
    tree.write({ uuid: uuidN(2), location: 'running', lock: { process_id: 1, hostname: 'far.example', acquired_at: ago(600_000), heartbeat_at: ago(300_000) } })
    tree.write({
      uuid: uuidN(3),
      location: 'running',
      lock: { process_id: deadPid(), hostname: hostname(), acquired_at: ago(600_000), heartbeat_at: new Date(Date.now() + 86_400_000).toISOString() },
    })
    // The remote lock's mtime must be old too: our clock must agree with theirs.
    const old = (Date.now() - 300_000) / 1000
    utimesSync(join(tree.layout.taskDir('running', uuidN(2)), '.lock'), old, old)
    const res = cli(['watch-locks', '--once', '--json', '--home', tree.base])
    const findings = findingsText(res.stdout)
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { uuid: string; reason: string; action: string })
    const reaped = findings.filter((f) => f.action === 'reaped')
    expect(reaped.map((r) => r.uuid).sort()).toEqual([uuidN(1), uuidN(2)])
    expect(reaped.find((r) => r.uuid === uuidN(1))?.reason).toContain('reused')
    expect(existsSync(tree.layout.taskDir('running', uuidN(3)))).toBe(true)
  })

  it('moves a lock-less task whose owner stopped before its move only after stale-after', async () => {
    const tree = makeTree()
    tree.write({ uuid: uuidN(11), location: 'running', status: 'failed', state: { updated_at: new Date().toISOString() } })
    tree.write({ uuid: uuidN(12), location: 'running', status: 'paused', state: { updated_at: ago(120_000) } })
    tree.write({ uuid: uuidN(13), location: 'running', status: 'processing', state: { updated_at: ago(120_000) } })
    const res = cli(['watch-locks', '--once', '--json', '--home', tree.base])
    const acted = findingsText(res.stdout)
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { uuid: string; action: string })
      .filter((f) => f.action !== 'alert')
    expect(acted.map((f) => [f.uuid, f.action]).sort()).toEqual([
      [uuidN(12), 'finished'],
      [uuidN(13), 'reaped'],
    ])
    expect(existsSync(tree.layout.taskDir('running', uuidN(11)))).toBe(true)
    expect(state(tree.layout.taskDir('paused', uuidN(12))).status).toBe('paused')
    expect(state(tree.layout.taskDir('paused', uuidN(13)))).toMatchObject({
      status: 'paused',
      paused_by: 'reaper',
      error: expect.stringContaining('no lock held'),
    })
  })

  it('alerts on tasks running longer than alerts.long_running_hours', async () => {
    const tree = makeTree()
    // Running since the lock was taken 7 h ago; another task started long ago but resumed just now is not.
    tree.write({
      uuid: uuidN(7),
      location: 'running',
      lock: {
        process_id: process.pid,
        process_start: processStart(process.pid),
        hostname: hostname(),
        acquired_at: ago(7 * 3_600_000),
        heartbeat_at: ago(1000),
      },
    })
    tree.write({
      uuid: uuidN(8),
      location: 'running',
      startedAt: ago(9 * 86_400_000),
      lock: { process_id: process.pid, process_start: processStart(process.pid), hostname: hostname(), acquired_at: ago(60_000), heartbeat_at: ago(1000) },
    })
    const res = cli(['watch-locks', '--once', '--json', '--home', tree.base])
    expect(JSON.parse(findingsText(res.stdout))).toMatchObject({ uuid: uuidN(7), action: 'alert', reason: expect.stringContaining('running for 7.0h') })
    const human = cli(['watch-locks', '--once', '--home', tree.base])
    expect(human.stdout).toMatch(/2 running task\(s\) checked, 0 recovered, 1 alert/)
  })
})

describe('unlock', () => {
  it('refuses a live holder with exit 4, and takes it with --force', async () => {
    const tree = makeTree()
    tree.write({
      uuid: uuidN(9),
      location: 'running',
      lock: { process_id: process.pid, process_start: processStart(process.pid), hostname: hostname(), acquired_at: ago(600_000), heartbeat_at: ago(300_000) },
    })
    const refused = cli(['unlock', uuidN(9), '--home', tree.base])
    expect(refused.code).toBe(4)
    expect(refused.stderr).toMatch(new RegExp(`^ctxagent: task ${uuidN(9)} is held by pid ${process.pid} on .+\\(.+--force.+\\)\\n$`))
    expect(existsSync(tree.layout.taskDir('running', uuidN(9)))).toBe(true)
    const forced = cli(['unlock', '00000009', '--force', '--json', '--home', tree.base])
    expect(forced.code).toBe(0)
    expect(JSON.parse(findingsText(forced.stdout))).toMatchObject({ uuid: uuidN(9), action: 'reaped' })
    expect(state(tree.layout.taskDir('completed', uuidN(9))).status).toBe('failed')
    const audit = readFileSync(join(tree.base, 'audit.jsonl'), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as Record<string, unknown>)
    // The refusal is recorded, and the forced takeover is marked as such.
    expect(audit).toEqual([
      expect.objectContaining({
        command: 'unlock',
        uuid: uuidN(9),
        event: 'refused',
        detail: expect.stringContaining(`pid ${process.pid}`),
        os_user: expect.any(String),
        ts: expect.any(String),
      }),
      expect.objectContaining({ command: 'unlock', uuid: uuidN(9), event: 'forced' }),
    ])
  })

  it('reaps a dead holder and says so', async () => {
    const tree = makeTree()
    tree.write({
      uuid: uuidN(10),
      location: 'running',
      lock: { process_id: deadPid(), hostname: hostname(), acquired_at: ago(600_000), heartbeat_at: ago(300_000) },
    })
    const res = cli(['unlock', uuidN(10), '--home', tree.base])
    expect(res.code).toBe(0)
    expect(res.stdout).toContain('reaped')
  })

  it('clears a lock left in paused/ by a process that died holding it, and leaves a live one', async () => {
    const tree = makeTree()
    tree.write({
      uuid: uuidN(12),
      location: 'paused',
      lock: { process_id: deadPid(), hostname: hostname(), acquired_at: ago(300_000), heartbeat_at: ago(300_000) },
    })
    tree.write({
      uuid: uuidN(13),
      location: 'paused',
      lock: { process_id: process.pid, process_start: processStart(process.pid), hostname: hostname(), acquired_at: ago(1000), heartbeat_at: ago(1000) },
    })
    const res = cli(['watch-locks', '--once', '--json', '--home', tree.base])
    expect(res.code, res.stderr).toBe(0)
    expect(JSON.parse(findingsText(res.stdout))).toMatchObject({
      uuid: uuidN(12),
      action: 'finished',
      reason: expect.stringContaining('removed a leftover lock'),
    })
    expect(existsSync(join(tree.layout.taskDir('paused', uuidN(12)), '.lock'))).toBe(false)
    expect(existsSync(join(tree.layout.taskDir('paused', uuidN(13)), '.lock'))).toBe(true)
  })

  it('a reaper that died while recovering a task is not taken for its agent: the next one still names the dead owner', async () => {
    const tree = makeTree()
    const owner = { process_id: 4242, hostname: 'build-7', heartbeat_at: ago(900_000) }
    tree.write({
      uuid: uuidN(11),
      location: 'running',
      lock: { process_id: deadPid(), hostname: hostname(), acquired_at: ago(300_000), heartbeat_at: ago(300_000), reaping: owner },
    })
    const res = cli(['watch-locks', '--once', '--json', '--home', tree.base])
    expect(res.code, res.stderr).toBe(0)
    expect(JSON.parse(findingsText(res.stdout))).toMatchObject({ uuid: uuidN(11), action: 'reaped', pid: 4242, hostname: 'build-7' })
    expect(state(tree.layout.taskDir('paused', uuidN(11))).error).toMatch(
      /^agent died: pid 4242 on build-7, last heartbeat .* \(a reaper, pid \d+, died while recovering it; pid \d+ is gone/,
    )
  })

  it('stops an owner whose lock was taken: it writes nothing more and exits with an error', async () => {
    const tree = makeTree()
    const owner = helper('owner.mjs', [tree.base, 'write', '0.2'])
    const uuid = (await lineFrom(owner, UUID_LINE)).trim()
    await sleep(300)
    const res = cli(['unlock', uuid, '--force', '--home', tree.base])
    expect(res.code).toBe(0)
    const exit = await exitOf(owner)
    expect(exit.code).toBe(7)
    const file = join(tree.layout.taskDir('completed', uuid), 'messages.jsonl')
    const before = readFileSync(file, 'utf8')
    await sleep(300)
    expect(readFileSync(file, 'utf8')).toBe(before)
    expect(
      before
        .trim()
        .split('\n')
        .every((l) => JSON.parse(l) !== null),
    ).toBe(true)
  })
})

describe('reindex', () => {
  it('rebuilds tasks.db from every location, including both seed formats, and reports unreadable directories', async () => {
    const tree = makeTree()
    tree.write({ uuid: uuidN(1), location: 'completed', messages: 12, summaries: 2, tools: 4 })
    tree.write({ uuid: uuidN(2), location: 'paused', format: 'seed003', messages: 5 })
    tree.write({ uuid: uuidN(3), location: 'running', messages: 1 })
    const broken = tree.write({ uuid: uuidN(4), location: 'completed' })
    writeFileSync(join(broken, 'metadata.json'), '{not json')
    const res = await cliIn(['reindex', '--home', tree.base])
    // The other three are indexed; the exit status says one was not.
    expect(res.code).toBe(1)
    expect(res.stdout).toContain('indexed 3 task(s)')
    expect(res.stdout).toContain(`completed/${uuidN(4)}`)
    const db = new Database(join(tree.base, 'tasks.db'), { readonly: true })
    const rows = db
      .prepare('SELECT uuid, location, status, total_messages, total_summaries, total_tool_calls, task_type, repository FROM tasks ORDER BY uuid')
      .all()
    db.close()
    expect(rows).toEqual([
      {
        uuid: uuidN(1),
        location: 'completed',
        status: 'completed',
        total_messages: 12,
        total_summaries: 2,
        total_tool_calls: 4,
        task_type: 'github_issue',
        repository: 'notfolder/coding_agent',
      },
      {
        uuid: uuidN(2),
        location: 'paused',
        status: 'paused',
        total_messages: 5,
        total_summaries: 1,
        total_tool_calls: 1,
        task_type: 'github_issue',
        repository: 'notfolder/coding_agent',
      },
      {
        uuid: uuidN(3),
        location: 'running',
        status: 'processing',
        total_messages: 1,
        total_summaries: 1,
        total_tool_calls: 1,
        task_type: 'github_issue',
        repository: 'notfolder/coding_agent',
      },
    ])
  })

  it('finishes a task that died between its move to completed/ and its final status', async () => {
    const tree = makeTree()
    const dir = tree.write({ uuid: uuidN(5), location: 'completed', status: 'completing' })
    expect((await cliIn(['reindex', '--home', tree.base])).code).toBe(0)
    expect(state(dir).status).toBe('completed')
  })

  it('watch-locks in loop mode before the tree exists creates nothing, and starts watching once it appears', async () => {
    const tree = makeTree()
    const base = join(tree.base, 'not-yet')
    const child = spawn(process.execPath, [BIN, 'watch-locks', '--interval', '1s', '--home', base], {
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, NO_COLOR: '1' },
    })
    let stderr = ''
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()))
    // Waits for the event (its warning), however long a busy machine takes to start it.
    while (!/no task tree at .*not-yet yet; nothing to watch/.test(stderr)) await sleep(50)
    expect(existsSync(base)).toBe(false)
    mkdirSync(join(base, 'running'), { recursive: true })
    await lineFrom(child, /watch-locks: 0 running task\(s\) checked/)
    expect(existsSync(join(base, '.watch-locks'))).toBe(true)
    child.kill('SIGTERM')
    expect((await exitOf(child)).code).toBe(0)
  })
})
