import { execFileSync } from 'node:child_process'
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, symlinkSync, utimesSync, writeFileSync } from 'node:fs'
import Database from 'better-sqlite3'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, expect, it, onTestFinished } from 'vitest'
import { makeTree, uuidN } from '../fixtures/tree.js'
import { hostname } from '../../src/storage/fs/process-info.js'
import { cli, cliAsync, findingsText } from '../helpers/run.js'
import { cliIn } from '../helpers/in-process.js'

const OLD = '2020-01-01T00:00:00.000Z'

describe('stray entries, links and a stale index', () => {
  it('a regular file named like a uuid in completed/ is not a task: cleanup and stats go on, view says there is no such task', async () => {
    const tree = makeTree()
    tree.write({ uuid: uuidN(1), location: 'completed', completedAt: OLD, messages: 5 })
    writeFileSync(join(tree.base, 'completed', uuidN(2)), 'stray\n')
    const cleanup = cli(['cleanup', '--json', '--home', tree.base])
    expect(cleanup.code, cleanup.stderr).toBe(0)
    expect(existsSync(join(tree.base, 'completed', uuidN(1)))).toBe(false)
    expect(readFileSync(join(tree.base, 'completed', uuidN(2)), 'utf8')).toBe('stray\n')
    const view = await cliIn(['view', uuidN(2), '--home', tree.base])
    expect(view.code).toBe(3)
    expect(view.stderr.trim().split('\n')).toHaveLength(1)
  })

  it('readers and cleanup never follow a link out of a task directory', async () => {
    const tree = makeTree()
    const outside = join(tmpdir(), `ctxagent-outside-${process.pid}`)
    mkdirSync(outside, { recursive: true })
    onTestFinished(() => rmSync(outside, { recursive: true, force: true }))
    writeFileSync(join(outside, 'secret.jsonl'), `${JSON.stringify({ seq: 1, role: 'user', content: 'OUTSIDE SECRET', timestamp: OLD, token_count: 1 })}\n`)
    const id = uuidN(3)
    const dir = tree.write({ uuid: id, location: 'completed', completedAt: OLD, messages: 0, tools: 0 })
    rmSync(join(dir, 'messages.jsonl'), { force: true })
    rmSync(join(dir, 'tools.jsonl'), { force: true })
    symlinkSync(join(outside, 'secret.jsonl'), join(dir, 'messages.jsonl'))
    symlinkSync(join(outside, 'secret.jsonl'), join(dir, 'tools.jsonl'))
    mkdirSync(join(dir, 'odd.jsonl'))
    const view = await cliIn(['view', id, '--messages', '--all', '--json', '--home', tree.base])
    expect(view.code).toBe(1)
    expect(view.stderr.trimEnd().split('\n')).toEqual([expect.stringMatching(/messages\.jsonl is a symbolic link/)])
    expect(view.stdout).not.toContain('OUTSIDE SECRET')
    const cleanup = cli(['cleanup', '--compress-after', '1d', '--delete-after', '10000d', '--home', tree.base])
    // Not gzipped around the links: the task is named and left as it was.
    expect(cleanup.code).toBe(1)
    expect(cleanup.stderr).toMatch(/1 task\(s\) in completed\/ could not be cleaned up.*is a symbolic link/)
    const names = readdirSync(dir)
    expect(names.filter((n) => n.endsWith('.tmp'))).toEqual([])
    expect(names).not.toContain('tools.jsonl.gz')
    expect(names).not.toContain('messages.jsonl.gz')
    expect(readFileSync(join(outside, 'secret.jsonl'), 'utf8')).toContain('OUTSIDE SECRET')
  })

  it('stats notices a tasks.db that drifted from the directories and counts from the directories instead', async () => {
    const tree = makeTree()
    for (let i = 10; i < 13; i++) tree.write({ uuid: uuidN(i), location: 'completed', completedAt: OLD, messages: 3 })
    expect((await cliIn(['reindex', '--home', tree.base])).code).toBe(0)
    // Two more tasks the index does not know (a crash between a move and its row).
    tree.write({ uuid: uuidN(20), location: 'completed', completedAt: OLD, messages: 3 })
    tree.write({ uuid: uuidN(21), location: 'running', status: 'processing', completedAt: null, messages: 3 })
    const res = await cliIn(['stats', '--json', '--home', tree.base])
    expect(res.code, res.stderr).toBe(0)
    expect(res.stderr).toMatch(/tasks\.db is out of date \(running\/ has 1, the index 0; completed\/ has 4, the index 3\).*ctxagent reindex/)
    expect((JSON.parse(res.stdout) as { total: number }).total).toBe(5)
  })

  it('the next watch-locks pass brings a drifted tasks.db back in step: rows added, moved and dropped, nothing else read', async () => {
    const tree = makeTree()
    for (let i = 40; i < 44; i++) tree.write({ uuid: uuidN(i), location: 'completed', completedAt: OLD, messages: 3 })
    tree.write({ uuid: uuidN(44), location: 'paused', messages: 3 })
    expect((await cliIn(['reindex', '--home', tree.base])).code).toBe(0)
    // A crash between a move and its row; a task copied in by hand; a task removed by hand.
    renameSync(tree.layout.taskDir('paused', uuidN(44)), tree.layout.taskDir('completed', uuidN(44)))
    tree.write({ uuid: uuidN(45), location: 'completed', completedAt: OLD, messages: 7 })
    rmSync(tree.layout.taskDir('completed', uuidN(40)), { recursive: true })
    const res = cli(['watch-locks', '--once', '--home', tree.base])
    expect(res.code, res.stderr).toBe(0)
    expect(res.stdout).toContain('3 index row(s) brought in step with the directories')
    const db = new Database(join(tree.base, 'tasks.db'), { readonly: true })
    const rows = db.prepare('SELECT uuid, location, total_messages FROM tasks ORDER BY uuid').all()
    db.close()
    expect(rows).toEqual([
      ...[41, 42, 43].map((i) => ({ uuid: uuidN(i), location: 'completed', total_messages: 3 })),
      { uuid: uuidN(44), location: 'completed', total_messages: 3 },
      { uuid: uuidN(45), location: 'completed', total_messages: 7 },
    ])
    const stats = await cliIn(['stats', '--json', '--home', tree.base])
    expect(stats.stderr).toBe('')
    expect(cli(['watch-locks', '--once', '--home', tree.base]).stdout).not.toContain('brought in step')
  })

  it('cleanup reports completed tasks whose state.json cannot date them, and ages them by their files instead of skipping them', async () => {
    const tree = makeTree()
    const old = new Date('2020-01-01T00:00:00Z')
    const recent = new Date(Date.now() - 2 * 86_400_000)
    const cases: [number, (dir: string) => void, Date, RegExp][] = [
      [0x31, (dir) => writeFileSync(join(dir, 'state.json'), ''), old, /is not valid JSON/],
      [0x32, (dir) => rmSync(join(dir, 'state.json')), old, /no state\.json/],
      [0x33, (dir) => writeFileSync(join(dir, 'state.json'), '{"status": "completed", "completed_at": "yesterday"}'), old, /"yesterday" is not a date/],
      [0x34, (dir) => writeFileSync(join(dir, 'state.json'), '{"status": "completed"}'), recent, /has no completed_at/],
      [0x35, (dir) => writeFileSync(join(dir, 'state.json'), '[1, 2'), recent, /is not valid JSON/],
    ]
    for (const [n, spoil, when] of cases) {
      const dir = tree.write({ uuid: uuidN(n), location: 'completed', messages: 4 })
      spoil(dir)
      for (const name of readdirSync(dir)) utimesSync(join(dir, name), when, when)
      utimesSync(dir, new Date(), new Date()) // the directory itself looks young: the files' times decide
    }
    const res = cli(['cleanup', '--json', '--compress-after', '1d', '--delete-after', '30d', '--home', tree.base])
    expect(res.code, res.stderr).toBe(0)
    const report = JSON.parse(res.stdout) as { deleted: { uuid: string }[]; compressed: { uuid: string }[]; undated: { uuid: string; reason: string }[] }
    expect(report.deleted.map((t) => t.uuid).sort()).toEqual([uuidN(0x31), uuidN(0x32), uuidN(0x33)])
    expect(report.compressed.map((t) => t.uuid).sort()).toEqual([uuidN(0x34), uuidN(0x35)])
    expect(report.undated.map((u) => u.uuid).sort()).toEqual(cases.map(([n]) => uuidN(n)))
    for (const [n, , , says] of cases) expect(report.undated.find((u) => u.uuid === uuidN(n))?.reason).toMatch(says)
    expect(res.stderr.trim().split('\n')).toEqual([
      expect.stringMatching(/^ctxagent: warning: 5 task\(s\) in completed\/ have no usable completed_at.*and 2 more/),
    ])
    // Gzipped, they keep their files' times: the next cleanup does not think them young.
    const again = JSON.parse(cli(['cleanup', '--json', '--compress-after', '1d', '--delete-after', '1d', '--home', tree.base]).stdout) as {
      deleted: { uuid: string }[]
    }
    expect(again.deleted.map((t) => t.uuid).sort()).toEqual([uuidN(0x34), uuidN(0x35)])
  })

  it('reindex and cleanup name stray entries (a file, a dangling link) in one warning and go on', async () => {
    const tree = makeTree()
    tree.write({ uuid: uuidN(0x30), location: 'completed', completedAt: OLD, messages: 3 })
    writeFileSync(join(tree.base, 'completed', uuidN(0x31)), 'stray\n')
    symlinkSync(join(tree.base, 'nowhere'), join(tree.base, 'paused', uuidN(0x32)))
    for (const args of [['reindex'], ['cleanup', '--dry-run']]) {
      const res = cli([...args, '--home', tree.base])
      expect(res.code, res.stderr).toBe(0)
      expect(res.stderr.trimEnd().split('\n')).toEqual([
        `ctxagent: warning: 2 entries named like a task but not a task directory, left alone: paused/${uuidN(0x32)} (a symbolic link), completed/${uuidN(0x31)} (a regular file) (move them out of the tree)`,
      ])
    }
  })

  it('reindex sets a damaged tasks.db aside and rebuilds it, instead of refusing', async () => {
    const tree = makeTree()
    tree.write({ uuid: uuidN(0x40), location: 'completed', completedAt: OLD, messages: 3 })
    writeFileSync(join(tree.base, 'tasks.db'), 'not a database at all\n'.repeat(100))
    const res = await cliIn(['reindex', '--home', tree.base])
    expect(res.code, res.stderr).toBe(0)
    expect(res.stderr).toMatch(/tasks\.db was damaged; moved aside to .*tasks\.db\.damaged-\S+ and rebuilt/)
    const aside = readdirSync(tree.base).filter((n) => n.startsWith('tasks.db.damaged-'))
    expect(aside).toHaveLength(1)
    expect(readFileSync(join(tree.base, aside[0] as string), 'utf8')).toContain('not a database at all')
    expect((await cliIn(['stats', '--json', '--home', tree.base])).stdout).toMatch(/"total": ?1/)
  })

  it('cleanup removes temp files that dead processes left in task directories (a dry run counts them), never a live one', async () => {
    const tree = makeTree()
    const done = tree.write({ uuid: uuidN(0x50), location: 'completed', completedAt: new Date().toISOString(), messages: 3 })
    const paused = tree.write({ uuid: uuidN(0x51), location: 'paused', status: 'paused', completedAt: null, messages: 3 })
    const dead = 2 ** 22 + 12345 // above pid_max's default: no such process
    const litter = [
      join(done, `state.json.${dead}.deadbeef.tmp`),
      join(done, `messages.jsonl.gz.${dead}.0badf00d.tmp`),
      join(paused, `current.jsonl.${dead}.abcdef12.tmp`),
    ]
    for (const path of litter) writeFileSync(path, 'half\n')
    const live = join(paused, `state.json.${process.pid}.12345678.tmp`)
    writeFileSync(live, 'being written\n')
    const dry = cli(['cleanup', '--dry-run', '--home', tree.base])
    expect(dry.code, dry.stderr).toBe(0)
    expect(dry.stdout).toContain('3 temp file(s) of dead processes would be removed')
    for (const path of litter) expect(existsSync(path)).toBe(true)
    const real = cli(['cleanup', '--json', '--home', tree.base])
    expect(real.code, real.stderr).toBe(0)
    expect(JSON.parse(real.stdout)).toMatchObject({ litter: 3, failed: [] })
    for (const path of litter) expect(existsSync(path)).toBe(false)
    expect(existsSync(live)).toBe(true)
  })

  it('reindexes run at once all succeed: each waits for the other writers instead of failing with "locked"', async () => {
    const tree = makeTree()
    for (let i = 0; i < 200; i++) tree.write({ uuid: uuidN(0x1000 + i), location: 'completed', completedAt: OLD, messages: 2 })
    const results = await Promise.all(Array.from({ length: 6 }, () => cliAsync(['reindex', '--home', tree.base])))
    for (const res of results) expect(res.code, res.stderr).toBe(0)
    expect((await cliIn(['stats', '--json', '--home', tree.base])).stdout).toMatch(/"total": ?200/)
  })

  it('watch-locks alerts on a .lock that is not a lock record (garbage, a directory), and unlock --force recovers such a task', async () => {
    const tree = makeTree()
    const garbage = tree.write({ uuid: uuidN(0x60), location: 'running', status: 'processing', completedAt: null, messages: 3, lock: 'not json at all' })
    const dir = tree.write({ uuid: uuidN(0x61), location: 'running', status: 'processing', completedAt: null, messages: 3 })
    rmSync(join(dir, '.lock'), { force: true })
    mkdirSync(join(dir, '.lock'))
    expect(existsSync(join(garbage, '.lock'))).toBe(true)
    const pass = cli(['watch-locks', '--once', '--json', '--home', tree.base])
    expect(pass.code, pass.stderr).toBe(0)
    expect(pass.stderr).toBe('')
    const alerts = findingsText(pass.stdout)
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { uuid: string; action: string; reason: string })
    for (const uuid of [uuidN(0x60), uuidN(0x61)]) {
      expect(alerts).toContainEqual({
        uuid,
        action: 'alert',
        reason: expect.stringContaining(`not a lock record`),
        pid: null,
        hostname: null,
        heartbeat_at: null,
      })
    }
    const forced = cli(['unlock', uuidN(0x61), '--force', '--home', tree.base])
    expect(forced.code, forced.stderr).toBe(0)
    expect(existsSync(tree.layout.taskDir('completed', uuidN(0x61)))).toBe(true)
    expect(readdirSync(tree.layout.dir('running')).filter((n) => n.endsWith('.tmp'))).toEqual([])
  })

  it('a state.json that does not say when the task started is never given an invented date (1970)', async () => {
    const tree = makeTree()
    const dir = tree.write({
      uuid: uuidN(0x70),
      location: 'running',
      status: 'processing',
      completedAt: null,
      messages: 3,
      lock: { process_id: 2 ** 22 + 7, hostname: hostname(), acquired_at: OLD, heartbeat_at: OLD },
    })
    const state = JSON.parse(readFileSync(join(dir, 'state.json'), 'utf8')) as Record<string, unknown>
    delete state.started_at
    writeFileSync(join(dir, 'state.json'), JSON.stringify(state))
    const view = await cliIn(['view', uuidN(0x70), '--json', '--home', tree.base])
    expect(view.code, view.stderr).toBe(0)
    expect(view.stdout).not.toContain('1970')
    expect(cli(['watch-locks', '--once', '--home', tree.base]).code).toBe(0)
    const after = JSON.parse(readFileSync(join(tree.layout.taskDir('paused', uuidN(0x70)), 'state.json'), 'utf8')) as Record<string, unknown>
    expect(after).toMatchObject({ status: 'paused', started_at: null })
  })

  it('a FIFO for a task file: cleanup does not gzip around it, compress refuses, unlock of a dead task refuses before touching its lock', async () => {
    const tree = makeTree()
    const done = tree.write({ uuid: uuidN(0x80), location: 'completed', completedAt: OLD, messages: 3 })
    rmSync(join(done, 'messages.jsonl'))
    execFileSync('mkfifo', [join(done, 'messages.jsonl')])
    const cleanup = cli(['cleanup', '--json', '--compress-after', '1d', '--delete-after', '10000d', '--home', tree.base])
    expect(cleanup.code).toBe(1)
    expect(JSON.parse(cleanup.stdout)).toMatchObject({
      compressed: [],
      failed: [{ uuid: uuidN(0x80), error: expect.stringContaining('messages.jsonl is not a regular file') }],
    })
    expect(readdirSync(done).filter((n) => n.endsWith('.gz'))).toEqual([])
    const compress = cli(['compress', uuidN(0x80), '--extractive', '--home', tree.base])
    expect(compress.code).toBe(1)
    expect(compress.stderr).toMatch(/messages\.jsonl is not a regular file/)
    const lock = { process_id: 2 ** 22 + 9, hostname: hostname(), acquired_at: OLD, heartbeat_at: OLD }
    const dead = tree.write({ uuid: uuidN(0x81), location: 'running', status: 'processing', completedAt: null, messages: 3, lock })
    rmSync(join(dead, 'state.json'))
    execFileSync('mkfifo', [join(dead, 'state.json')])
    const before = readFileSync(join(dead, '.lock'), 'utf8')
    const unlock = cli(['unlock', uuidN(0x81), '--home', tree.base])
    expect(unlock.code).toBe(1)
    expect(unlock.stderr).toMatch(/state\.json is not a regular file/)
    expect(readFileSync(join(dead, '.lock'), 'utf8')).toBe(before)
  })

  it('tasks.db as a link out of the tree, or -shm as a directory: never followed; reindex sets them aside and rebuilds', async () => {
    const tree = makeTree()
    tree.write({ uuid: uuidN(0x90), location: 'completed', completedAt: OLD, messages: 3 })
    const outside = join(tmpdir(), `ctxagent-outside-db-${process.pid}`)
    writeFileSync(outside, 'not ours\n')
    onTestFinished(() => rmSync(outside, { force: true }))
    symlinkSync(outside, join(tree.base, 'tasks.db'))
    const stats = await cliIn(['stats', '--json', '--home', tree.base])
    expect(stats.code, stats.stderr).toBe(0)
    expect(stats.stderr).toMatch(/tasks\.db is a symbolic link/)
    const reindex = await cliIn(['reindex', '--home', tree.base])
    expect(reindex.code, reindex.stderr).toBe(0)
    expect(readFileSync(outside, 'utf8')).toBe('not ours\n')
    expect(readdirSync(tree.base).filter((n) => n.startsWith('tasks.db.damaged-'))).toHaveLength(1)
    mkdirSync(join(tree.base, 'tasks.db-shm'))
    const again = await cliIn(['reindex', '--home', tree.base])
    expect(again.code, again.stderr).toBe(0)
    expect(again.stderr).toMatch(/tasks\.db was damaged; moved aside/)
    expect((await cliIn(['stats', '--json', '--home', tree.base])).stdout).toMatch(/"total": ?1/)
  })

  it('a lock whose pid cannot be a process gets the unreadable-lock alert; reindex exits 1 when a directory could not be read', async () => {
    const tree = makeTree()
    tree.write({
      uuid: uuidN(0xa0),
      location: 'running',
      status: 'processing',
      completedAt: null,
      messages: 3,
      lock: { process_id: 0, hostname: hostname(), acquired_at: OLD, heartbeat_at: OLD },
    })
    const pass = cli(['watch-locks', '--once', '--json', '--home', tree.base])
    expect(pass.stdout).toContain('not a lock record')
    const broken = tree.write({ uuid: uuidN(0xa1), location: 'completed', completedAt: OLD, messages: 3 })
    writeFileSync(join(broken, 'metadata.json'), '{ not json')
    const reindex = await cliIn(['reindex', '--home', tree.base])
    expect(reindex.code).toBe(1)
    expect(reindex.stdout).toContain(`completed/${uuidN(0xa1)}`)
    expect(reindex.stderr.trimEnd().split('\n')).toEqual([
      'ctxagent: 1 task directory could not be read and is not in tasks.db (listed above; fix or move them, then run ctxagent reindex again)',
    ])
  })

  it('stats counting from the directories names the ones it could not read instead of leaving them out silently', async () => {
    const tree = makeTree()
    tree.write({ uuid: uuidN(0xb0), location: 'completed', completedAt: OLD, messages: 3 })
    const broken = tree.write({ uuid: uuidN(0xb1), location: 'completed', completedAt: OLD, messages: 3 })
    writeFileSync(join(broken, 'metadata.json'), 'null')
    const res = await cliIn(['stats', '--json', '--home', tree.base])
    expect(res.code, res.stderr).toBe(0)
    expect(res.stderr).toContain(
      `ctxagent: warning: 1 task directory could not be read and is not counted: 000000b1 (${broken}/metadata.json is not a JSON object) (ctxagent reindex lists them all)`,
    )
    expect(JSON.parse(res.stdout)).toMatchObject({ total: 1 })
  })
})
