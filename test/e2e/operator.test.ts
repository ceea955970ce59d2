import { readdirSync, readFileSync, statSync, unlinkSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { gzipSync } from 'node:zlib'
import { describe, expect, it } from 'vitest'
import { hostname, processStart } from '../../src/storage/fs/process-info.js'
import { makeTree, uuidN } from '../fixtures/tree.js'
import type { Tree } from '../fixtures/tree.js'
import { cli, deadPid, helper } from '../helpers/run.js'
import { cliIn } from '../helpers/in-process.js'
import { snapshotTree } from '../helpers/tree-snapshot.js'
import { exitOf, lineFrom, sleep } from '../helpers/wait.js'

const NOW = { CTXAGENT_NOW: '2024-02-01T00:00:00.000Z' }

/** Five tasks in both seed formats, several users, statuses and ages, a torn line, a gzipped task. */
function fleet(): Tree {
  const tree = makeTree()
  tree.write({ uuid: uuidN(0xa1), location: 'completed', user: 'alice', createdAt: '2024-01-10T09:00:00.000Z', messages: 12, summaries: 2, tools: 3 })
  tree.write({ uuid: uuidN(0xb2), location: 'paused', format: 'seed003', user: 'bob', createdAt: '2024-01-20T09:00:00.000Z', messages: 4 })
  // Live: this test process holds its lock, with a heartbeat 10 s before the pinned clock.
  const lock = {
    process_id: process.pid,
    process_start: processStart(process.pid),
    hostname: hostname(),
    acquired_at: '2024-01-31T23:00:00.000Z',
    heartbeat_at: '2024-01-31T23:59:50.000Z',
  }
  tree.write({
    uuid: uuidN(0xc3),
    location: 'running',
    user: 'alice',
    createdAt: '2024-01-31T23:00:00.000Z',
    messages: 6,
    messagesTail: '{"seq":7,"role":"assist',
    lock,
  })
  tree.write({ uuid: uuidN(0xd4), location: 'completed', status: 'failed', user: 'carol', createdAt: '2024-01-05T09:00:00.000Z', messages: 2 })
  const gz = tree.write({
    uuid: uuidN(0xe5),
    location: 'completed',
    user: 'bob',
    createdAt: '2023-12-01T09:00:00.000Z',
    completedAt: '2023-12-01T10:00:00.000Z',
    messages: 9,
  })
  for (const name of ['messages.jsonl', 'summaries.jsonl', 'tools.jsonl']) {
    writeFileSync(join(gz, `${name}.gz`), gzipSync(readFileSync(join(gz, name))))
    unlinkSync(join(gz, name)) // as cleanup leaves it
  }
  return tree
}

describe('view', () => {
  it('prints the overview as stable JSON (golden), for plain and gzipped tasks', async () => {
    const tree = fleet()
    for (const uuid of [uuidN(0xa1), uuidN(0xe5)]) {
      const res = await cliIn(['view', uuid, '--json', '--home', tree.base], NOW)
      expect(res.code).toBe(0)
      expect(res.stderr).toBe('')
      await expect(res.stdout).toMatchFileSnapshot(`__golden__/view-${uuid.slice(0, 8)}.json`)
    }
  })

  it('accepts --uuid and a prefix, and prints the human overview', async () => {
    const tree = fleet()
    const res = await cliIn(['view', '--uuid', '000000a1', '--home', tree.base], NOW)
    expect(res.code).toBe(0)
    expect(res.stdout).toContain(`Task UUID: ${uuidN(0xa1)}`)
    expect(res.stdout).toContain('Status: completed (completed/)')
    expect(res.stdout).toContain('Repository: github/notfolder/coding_agent')
    expect(res.stdout).toContain('Task: issue #27')
    expect(res.stdout).toContain('Duration: 5d 1h')
    expect(res.stdout).toContain('Messages: 12 (showing last 10)')
    expect(res.stdout).toContain('[1] seq 10-19: Fixed part 1 more')
  })

  it('lists records exactly as stored, newest last, with --limit, --all and --role', async () => {
    const tree = fleet()
    const stored = readFileSync(join(tree.layout.taskDir('completed', uuidN(0xa1)), 'messages.jsonl'), 'utf8')
      .trim()
      .split('\n')
    const two = await cliIn(['view', uuidN(0xa1), '--messages', '--limit', '2', '--json', '--home', tree.base])
    expect(two.stdout.trim().split('\n')).toEqual(stored.slice(-2))
    const all = await cliIn(['view', uuidN(0xa1), '--messages', '--all', '--json', '--home', tree.base])
    expect(all.stdout.trim().split('\n')).toEqual(stored)
    const tools = await cliIn(['view', uuidN(0xa1), '--messages', '--role', 'tool', '--all', '--json', '--home', tree.base])
    expect(tools.stdout.trim().split('\n')).toEqual(stored.filter((l) => l.includes('"role":"tool"')))
    const summaries = await cliIn(['view', uuidN(0xb2), '--summaries', '--json', '--home', tree.base])
    expect(JSON.parse(summaries.stdout)).toMatchObject({ id: 1, tokens_saved: 5000 })
  })

  it('skips a torn last line with one warning that counts it', async () => {
    const tree = fleet()
    const res = await cliIn(['view', uuidN(0xc3), '--json', '--home', tree.base], NOW)
    expect(res.code).toBe(0)
    expect(res.stderr).toBe('ctxagent: warning: skipped 1 unreadable line (a torn last line or invalid JSON)\n')
    expect(JSON.parse(res.stdout)).toMatchObject({ location: 'running', counts: { messages: 6, bad_lines: 1 } })
  })

  it('reads a gzipped task like a plain one', async () => {
    const tree = fleet()
    const res = await cliIn(['view', uuidN(0xe5), '--messages', '--all', '--json', '--home', tree.base])
    expect(res.stdout.trim().split('\n')).toHaveLength(9)
  })

  it('exits 3 for an unknown task, 2 for conflicting listings or a bad role', async () => {
    const tree = fleet()
    expect((await cliIn(['view', 'ffffffff', '--home', tree.base])).code).toBe(3)
    expect((await cliIn(['view', uuidN(0xa1), '--messages', '--tools', '--home', tree.base])).code).toBe(2)
    expect((await cliIn(['view', uuidN(0xa1), '--role', 'robot', '--home', tree.base])).code).toBe(2)
    expect((await cliIn(['view', '--home', tree.base])).code).toBe(2)
  })

  it('follows a running task until it leaves running/', async () => {
    const tree = makeTree()
    const owner = helper('finisher.mjs', [tree.base, '5'])
    const uuid = (await lineFrom(owner, /^[0-9a-f-]{36}$/)).trim()
    const follower = helper('../../bin/ctxagent', ['view', uuid, '--follow', '--json', '--limit', '1', '--home', tree.base])
    let out = ''
    follower.stdout.on('data', (d: Buffer) => (out += d.toString()))
    await lineFrom(follower, /"ready"/)
    writeFileSync(join(tree.base, 'go'), '')
    const [ownerExit, followerExit] = await Promise.all([exitOf(owner), exitOf(follower)])
    expect(ownerExit.code).toBe(0)
    expect(followerExit.code).toBe(0)
    const contents = out
      .trim()
      .split('\n')
      .map((l) => (JSON.parse(l) as { content: string }).content)
    expect(contents).toEqual(['ready', 'step 1', 'step 2', 'step 3', 'step 4', 'step 5'])
  })

  it('never writes into the task it reads, and records the read in audit.jsonl', async () => {
    const tree = fleet()
    const dir = tree.layout.taskDir('running', uuidN(0xc3))
    const before = snapshotTree(dir)
    await cliIn(['view', uuidN(0xc3), '--home', tree.base])
    await cliIn(['view', uuidN(0xc3), '--messages', '--all', '--home', tree.base])
    expect(snapshotTree(dir)).toEqual(before)
    const audit = readFileSync(join(tree.base, 'audit.jsonl'), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { command: string; uuid: string })
    expect(audit.map((a) => [a.command, a.uuid])).toEqual([
      ['view', uuidN(0xc3)],
      ['view', uuidN(0xc3)],
    ])
    expect(statSync(join(tree.base, 'audit.jsonl')).mode & 0o777).toBe(0o600)
  })
})

describe('stats', () => {
  it('prints totals, disk, averages and users as stable JSON (golden), from tasks.db', async () => {
    const tree = fleet()
    expect((await cliIn(['reindex', '--home', tree.base])).code).toBe(0)
    const res = await cliIn(['stats', '--json', '--home', tree.base], NOW)
    expect(res.code).toBe(0)
    const report = JSON.parse(res.stdout) as { disk: { completed: number; completed_before_gzip: number } }
    // Disk sizes depend on the filesystem's block-free byte counts only; keep them out of the golden file.
    expect(report.disk.completed).toBeGreaterThan(0)
    expect(report.disk.completed_before_gzip).toBeGreaterThan(report.disk.completed)
    await expect(JSON.stringify({ ...report, disk: Object.keys(report.disk) }, null, 2)).toMatchFileSnapshot('__golden__/stats.json')
  })

  it('filters by user, status and creation date, and scans when tasks.db is missing', async () => {
    const tree = fleet()
    const scan = await cliIn(['stats', '--json', '--user', 'alice', '--home', tree.base])
    expect(scan.stderr).toContain('no tasks.db')
    expect(JSON.parse(scan.stdout)).toMatchObject({ total: 2, by_location: { running: 1, completed: 1, paused: 0 } })
    await cliIn(['reindex', '--home', tree.base])
    expect(JSON.parse((await cliIn(['stats', '--json', '--status', 'failed', '--home', tree.base])).stdout)).toMatchObject({
      total: 1,
      by_user: [{ user: 'carol' }],
    })
    const january = JSON.parse((await cliIn(['stats', '--json', '--from', '2024-01-06', '--to', '2024-01-20', '--home', tree.base])).stdout) as {
      total: number
    }
    expect(january.total).toBe(2) // a1 (01-10) and b2 (01-20, the whole day counts)
    const human = await cliIn(['stats', '--home', tree.base])
    expect(human.stdout).toContain('Total contexts: 5')
    expect(human.stdout).toMatch(/Completed: .+ \(.+ before compression\)/)
  })

  it('--check exits 0 ok, 1 warning, 2 critical with one line per alert', async () => {
    const tree = makeTree()
    tree.write({ uuid: uuidN(1), location: 'completed' })
    await cliIn(['reindex', '--home', tree.base])
    // The machine's own free space is not this test's business (free_space has its own test).
    const roomy = join(tree.base, 'roomy.yaml')
    writeFileSync(roomy, 'alerts:\n  free_warning_percent: 0\n  free_critical_percent: 0\n')
    const ok = await cliIn(['stats', '--check', '--config', roomy, '--home', tree.base])
    expect(ok.code).toBe(0)
    expect(ok.stdout).toMatch(/^CTXAGENT OK - 1 tasks/)
    tree.write({ uuid: uuidN(2), location: 'completed', status: 'failed' })
    await cliIn(['reindex', '--home', tree.base])
    const warn = await cliIn(['stats', '--check', '--config', roomy, '--home', tree.base])
    expect(warn.code).toBe(1)
    expect(warn.stdout.trim().split('\n')).toEqual([
      expect.stringMatching(/^CTXAGENT WARNING - 1 alert/),
      'WARNING: failure rate 50.0% > 10% (1 of 2 finished tasks)',
    ])
    writeFileSync(join(tree.base, 'tight.yaml'), 'alerts:\n  disk_warning_gb: 0.0000001\n  disk_critical_gb: 0.000001\n')
    const crit = await cliIn(['stats', '--check', '--json', '--config', join(tree.base, 'tight.yaml'), '--home', tree.base])
    expect(crit.code).toBe(2)
    expect(JSON.parse(crit.stdout)).toMatchObject({
      status: 'critical',
      alerts: expect.arrayContaining([expect.objectContaining({ metric: 'disk', level: 'critical' })]),
    })
  })
})

describe('stats --check alerts on free space', () => {
  it('names the device holding the tree when its free space is under the thresholds', async () => {
    const tree = makeTree()
    tree.write({ uuid: uuidN(1), location: 'completed' })
    // 100 % and 99.9999 %: no real disk has that much room, so both levels must fire here.
    writeFileSync(join(tree.base, 'full.yaml'), 'alerts:\n  free_warning_percent: 100\n  free_critical_percent: 99.9999\n')
    const crit = await cliIn(['stats', '--check', '--json', '--config', join(tree.base, 'full.yaml'), '--home', tree.base])
    expect(crit.code).toBe(2)
    const alert = (JSON.parse(crit.stdout) as { alerts: { metric: string; level: string; message: string }[] }).alerts.find((a) => a.metric === 'free_space')
    expect(alert).toMatchObject({
      level: 'critical',
      message: expect.stringMatching(new RegExp(`% free \\(.+ GB\\) on the device holding ${tree.base} < 99\\.9999%`)),
    })
    writeFileSync(join(tree.base, 'warn.yaml'), 'alerts:\n  free_warning_percent: 100\n  free_critical_percent: 0\n')
    const warn = await cliIn(['stats', '--check', '--config', join(tree.base, 'warn.yaml'), '--home', tree.base])
    expect(warn.code).toBe(1)
    expect(warn.stdout).toMatch(/^WARNING: .+% free .+ < 100%$/m)
  })
})

describe('stats --check alerts on running tasks', () => {
  it('warns about too many tasks in running/ and about tasks running longer than the limit', async () => {
    const tree = makeTree()
    const live = (acquired: string) => ({
      process_id: process.pid,
      process_start: processStart(process.pid),
      hostname: hostname(),
      acquired_at: acquired,
      heartbeat_at: '2024-01-31T23:59:50.000Z',
    })
    tree.write({ uuid: uuidN(0x61), location: 'running', lock: live('2024-01-31T16:00:00.000Z') }) // 8 h before the pinned clock
    tree.write({ uuid: uuidN(0x62), location: 'running', lock: live('2024-01-31T23:00:00.000Z') }) // 1 h
    await cliIn(['reindex', '--home', tree.base], NOW)
    writeFileSync(join(tree.base, 'one.yaml'), 'alerts:\n  max_running_tasks: 1\n  free_warning_percent: 0\n  free_critical_percent: 0\n')
    const res = await cliIn(['stats', '--check', '--json', '--config', join(tree.base, 'one.yaml'), '--home', tree.base], NOW)
    expect(res.code).toBe(1)
    const result = JSON.parse(res.stdout) as { status: string; alerts: { metric: string; value: number; message: string }[] }
    expect(result.status).toBe('warning')
    expect(result.alerts.map((a) => [a.metric, a.value])).toEqual([
      ['running_tasks', 2],
      ['long_running', 1],
    ])
    expect(result.alerts[1]?.message).toContain('00000061')
  })
})

describe('cleanup', () => {
  it('--dry-run prints the plan and leaves the tree byte-identical', async () => {
    const tree = fleet()
    const before = snapshotTree(tree.base)
    const res = cli(['cleanup', '--dry-run', '--json', '--home', tree.base], NOW)
    expect(res.code).toBe(0)
    const plan = JSON.parse(res.stdout) as { compressed: { uuid: string }[]; deleted: { uuid: string }[]; dry_run: boolean }
    expect(plan.dry_run).toBe(true)
    expect(plan.compressed.map((t) => t.uuid).sort()).toEqual([uuidN(0xa1), uuidN(0xd4)])
    expect(plan.deleted.map((t) => t.uuid)).toEqual([uuidN(0xe5)])
    expect(snapshotTree(tree.base)).toEqual(before)
  })

  it('gzips old tasks so that view returns the same records, deletes expired ones, and never touches running/ or paused/', async () => {
    const tree = fleet()
    const records = async (uuid: string, what: string) => (await cliIn(['view', uuid, what, '--all', '--json', '--home', tree.base])).stdout
    const kept: Record<string, string> = {}
    for (const w of ['--messages', '--summaries', '--tools']) kept[w] = await records(uuidN(0xa1), w)
    const live = snapshotTree(tree.layout.dir('running'))
    const paused = snapshotTree(tree.layout.dir('paused'))
    const oldMtime = statSync(join(tree.layout.taskDir('completed', uuidN(0xa1)), 'messages.jsonl')).mtimeMs
    const res = cli(['cleanup', '--json', '--home', tree.base], NOW)
    expect(res.code).toBe(0)
    const report = JSON.parse(res.stdout) as { bytes_before: number; bytes_after: number; deleted: unknown[]; compressed: unknown[]; reaped: unknown[] }
    expect(report.reaped).toEqual([])
    expect(report.compressed).toHaveLength(2)
    expect(report.deleted).toHaveLength(1)
    expect(report.bytes_after).toBeLessThan(report.bytes_before)
    const dir = tree.layout.taskDir('completed', uuidN(0xa1))
    expect(readdirSync(dir).sort()).toEqual(['messages.jsonl.gz', 'metadata.json', 'state.json', 'summaries.jsonl.gz', 'tools.jsonl.gz'])
    expect(Math.abs(statSync(join(dir, 'messages.jsonl.gz')).mtimeMs - oldMtime)).toBeLessThan(0.001) // within 1 µs
    for (const [w, text] of Object.entries(kept)) expect(await records(uuidN(0xa1), w)).toBe(text)
    expect(readdirSync(tree.layout.dir('completed')).sort()).toEqual([uuidN(0xa1), uuidN(0xd4)])
    expect(snapshotTree(tree.layout.dir('running'))).toEqual(live)
    expect(snapshotTree(tree.layout.dir('paused'))).toEqual(paused)
    // Nothing left to do the second time.
    expect(JSON.parse(cli(['cleanup', '--json', '--home', tree.base], NOW).stdout)).toMatchObject({ compressed: [], deleted: [] })
  })

  it('reaps stale locks as watch-locks --once does', async () => {
    const tree = makeTree()
    tree.write({
      uuid: uuidN(0x77),
      location: 'running',
      lock: { process_id: deadPid(), hostname: hostname(), acquired_at: '2024-01-31T00:00:00.000Z', heartbeat_at: '2024-01-31T00:00:00.000Z' },
    })
    const res = cli(['cleanup', '--json', '--home', tree.base], NOW)
    expect(JSON.parse(res.stdout)).toMatchObject({ reaped: [{ uuid: uuidN(0x77), action: 'reaped' }] })
    // recovery: resume, the default: paused to be resumed.
    expect(readdirSync(tree.layout.dir('paused'))).toEqual([uuidN(0x77)])
  })

  it('--schedule repeats on its cron schedule until SIGTERM', async () => {
    const tree = fleet()
    const child = helper('../../bin/ctxagent', ['cleanup', '--schedule', '* * * * * *', '--home', tree.base])
    let out = ''
    child.stdout.on('data', (d: Buffer) => (out += d.toString()))
    while ((out.match(/gzipped, /g) ?? []).length < 2) await sleep(100)
    child.kill('SIGTERM')
    expect((await exitOf(child)).code).toBe(0)
  })

  it('rejects a bad schedule and bad durations with exit 2', async () => {
    const tree = fleet()
    expect(cli(['cleanup', '--schedule', 'every night', '--home', tree.base]).code).toBe(2)
    expect(cli(['cleanup', '--compress-after', 'week', '--home', tree.base]).code).toBe(2)
  })
})
