import { execFileSync } from 'node:child_process'
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { availableParallelism, tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, expect, it, onTestFinished } from 'vitest'
import { exitOf, until } from '../helpers/wait.js'
import { enqueue, started, startWorker } from '../helpers/fleet-worker.js'
import { startFakeGithub } from '../helpers/fake-github.js'
import { usePostgres } from '../helpers/use-postgres.js'
import { fleetJobs } from '../helpers/fleet-jobs.js'
import { canUnshare, finish, onHost } from '../helpers/fleet-hosts.js'
import { agentRequests, expectContinuousSeq, readTask, runSetup } from '../run/harness.js'

// The schema made first: a test that reads fleet_jobs before any command reached the database runs alone too.
const database = usePostgres({ schema: true, truncate: ['fleet_jobs', 'fleet_workers', 'tasks'] })
const query = database.query
const db = database.env

describe('enqueue and worker', () => {
  it('an idle worker runs what is enqueued, each task once, each in its own process; SIGTERM ends it with 0', async () => {
    const s = await runSetup()
    s.fake.fallback = () => finish
    const worker = startWorker(s, database.server.url, ['--concurrency', '2'])
    await started(worker)
    const uuids = [] as string[]
    for (let i = 0; i < 3; i++) uuids.push(await enqueue(s, database, ['--task', `task ${i}`, '--workspace', s.ws]))
    for (const uuid of uuids) expect(uuid).toMatch(/^[0-9a-f-]{36}$/)
    const jobs = await until('every job done', async () => {
      const rows = await fleetJobs(database)
      return rows.every((r) => r.state === 'done') && rows.length === 3 ? rows : null
    })
    expect(jobs).toMatchObject(uuids.map((task_uuid) => ({ task_uuid, state: 'done', outcome: 'completed' })))
    for (const uuid of uuids) {
      const task = readTask(s.tree, uuid)
      expect(task.location).toBe('completed')
      expect(task.state).toMatchObject({ status: 'completed', turns: 1 })
      expect(task.metadata).toMatchObject({ run: { workspace: s.ws } })
    }
    expect(agentRequests(s.fake)).toHaveLength(3)
    // Each ran in a process of its own, not in the worker's.
    const pids = new Set(uuids.map((uuid) => readTask(s.tree, uuid).metadata.process_id))
    expect(pids.size).toBe(3)
    expect(pids.has(worker.child.pid)).toBe(false)
    expect(await query('SELECT uuid, status, location FROM tasks ORDER BY uuid')).toEqual(
      [...uuids].sort().map((uuid) => ({ uuid, status: 'completed', location: 'completed' })),
    )
    worker.child.kill('SIGTERM')
    expect(await exitOf(worker.child)).toEqual({ code: 0, signal: null })
    expect(await query('SELECT count(*)::int AS n FROM fleet_workers WHERE stopped_at IS NOT NULL')).toEqual([{ n: 1 }])
  })

  it('SIGTERM pauses its running task and queues its resume, which another worker completes exactly', async () => {
    const s = await runSetup()
    let n = 0
    s.fake.fallback = () => ({ calls: [{ name: 'glob', arguments: { pattern: `*${n++}*` } }] })
    const first = startWorker(s, database.server.url)
    await started(first)
    const uuid = await enqueue(s, database, ['--task', 'look around', '--workspace', s.ws, '--max-turns', '1000000'])
    await until('the task to be under way', async () => agentRequests(s.fake).length >= 2)
    first.child.kill('SIGTERM')
    expect(await exitOf(first.child)).toEqual({ code: 0, signal: null })
    expect(readTask(s.tree, uuid)).toMatchObject({ location: 'paused', state: { status: 'paused' } })
    const jobs = await fleetJobs(database)
    expect(jobs).toMatchObject([
      { kind: 'new', state: 'done', outcome: 'paused' },
      { kind: 'resume', state: 'waiting', outcome: null },
    ])

    const before = readTask(s.tree, uuid).messages.length
    s.fake.fallback = () => finish
    const second = startWorker(s, database.server.url)
    await until('the resume to finish', async () => (await query<{ state: string }>("SELECT state FROM fleet_jobs WHERE kind = 'resume'"))[0]?.state === 'done')
    const task = readTask(s.tree, uuid)
    expect(task).toMatchObject({ location: 'completed', state: { status: 'completed' } })
    expectContinuousSeq(task.messages)
    expect(task.messages.length).toBeGreaterThan(before)
    second.child.kill('SIGTERM')
    expect(await exitOf(second.child)).toEqual({ code: 0, signal: null })
  })

  it('a --github job stopped while its issue is fetched waits again untouched; the next worker runs it and comments on the issue', async () => {
    const s = await runSetup()
    const gh = await startFakeGithub()
    writeFileSync(
      s.config,
      s.fake.configYaml(`github:\n  api_url: ${gh.url}\n  token: ${gh.token}\n  bot_name: ctxagent-bot\ncomments:\n  min_interval_seconds: 0.01\n`),
    )
    let open = (): void => undefined
    gh.gate = new Promise<void>((resolve) => (open = resolve))
    const first = startWorker(s, database.server.url)
    await started(first)
    const uuid = await enqueue(s, database, ['--github', 'acme/shop#42', '--workspace', s.ws])
    await until('the issue asked for', async () => gh.requests.some((r) => r.path.endsWith('/issues/42')))
    first.child.kill('SIGTERM')
    expect(await exitOf(first.child)).toEqual({ code: 0, signal: null })
    expect(first.err()).toContain('handed back to the queue')
    expect(await query('SELECT kind, state, attempts, outcome FROM fleet_jobs')).toEqual([{ kind: 'new', state: 'waiting', attempts: 0, outcome: null }])
    expect(s.tree.layout.list('running').concat(s.tree.layout.list('paused'), s.tree.layout.list('completed'))).toEqual([])

    gh.gate = null
    open()
    s.fake.fallback = () => finish
    const second = startWorker(s, database.server.url)
    await until('the job done', async () => (await query<{ state: string }>('SELECT state FROM fleet_jobs'))[0]?.state === 'done')
    expect(readTask(s.tree, uuid)).toMatchObject({
      location: 'completed',
      state: { status: 'completed' },
      metadata: { task_key: { task_source: 'github', task_id: '42' } },
    })
    expect(gh.requests.some((r) => r.method === 'POST' && r.path.endsWith('/issues/42/comments'))).toBe(true)
    second.child.kill('SIGTERM')
    expect((await exitOf(second.child)).code).toBe(0)
  })

  // Ten commands one after another, a worker and a task: past the 60 s default on a loaded machine (a give-up point, not a margin).
  it('enqueue --resume queues a paused task once; bad input says one line and queues nothing', { timeout: 180_000 }, async () => {
    const s = await runSetup()
    let n = 0
    s.fake.fallback = () => ({ calls: [{ name: 'glob', arguments: { pattern: `*${n++}*` } }] })
    const paused = await s.run(['run', '--task', 'look', '--workspace', s.ws, '--max-turns', '1'])
    expect(paused.code).toBe(5) // a budget: timeout, not resumable
    const none = await s.run(['enqueue', '--task', 'x', '--workspace', s.ws])
    expect(none).toMatchObject({
      code: 2,
      stderr: "ctxagent: enqueue needs the fleet's PostgreSQL database (set fleet.database_url in the config, or CTXAGENT_DATABASE_URL)\n",
    })
    const down = await s.run(['enqueue', '--task', 'x', '--workspace', s.ws], { CTXAGENT_DATABASE_URL: 'postgres://u:secret@127.0.0.1:1/x' })
    expect(down.code).toBe(1)
    expect(down.stderr).toMatch(/^ctxagent: cannot reach the fleet's database \(.*ECONNREFUSED.*\) \(check fleet.database_url/)
    expect(down.stderr).not.toContain('secret')
    expect(down.stderr.split('\n')).toHaveLength(2)
    const noWs = await s.run(['enqueue', '--task', 'x', '--workspace', '/nonexistent/ws'], db())
    expect(noWs.code).toBe(2)
    expect(noWs.stderr).toMatch(/^ctxagent: the workspace \/nonexistent\/ws is not a directory here/)
    const finished = readTask(s.tree, s.tree.layout.list('completed')[0] as string)
    const notPaused = await s.run(['enqueue', '--resume', finished.uuid], db())
    expect(notPaused.code).toBe(4)
    const unknown = await s.run(['enqueue', '--resume', '00000000-0000-4000-8000-000000000000'], db())
    expect(unknown.code).toBe(3)
    expect(await query('SELECT count(*)::int AS n FROM fleet_jobs')).toEqual([{ n: 0 }])

    // A task paused (by an operator here) is queued once; a second enqueue is a conflict.
    const worker = startWorker(s, database.server.url)
    await started(worker)
    const uuid = await enqueue(s, database, ['--task', 'look', '--workspace', s.ws, '--max-turns', '1000000'])
    await until('the task to be under way', async () => readTask(s.tree, uuid).messages.length >= 3)
    expect((await s.run(['pause', uuid])).code).toBe(0)
    await until('the job to end paused', async () => (await query<{ outcome: string }>('SELECT outcome FROM fleet_jobs'))[0]?.outcome === 'paused')
    // Paused by an operator: nothing queued again by itself.
    expect(await query('SELECT count(*)::int AS n FROM fleet_jobs')).toEqual([{ n: 1 }])
    s.fake.fallback = () => finish
    expect(await enqueue(s, database, ['--resume', uuid.slice(0, 8)])).toBe(uuid)
    const twice = await s.run(['enqueue', '--resume', uuid], db())
    // Either still waiting (a conflict) or already taken and running (a conflict too), or done: never two open jobs.
    expect([0, 4]).toContain(twice.code)
    await until('the resume to complete', async () => readTask(s.tree, uuid).state.status === 'completed')
    expect(readTask(s.tree, uuid).state.status).toBe('completed')
    worker.child.kill('SIGTERM')
    expect((await exitOf(worker.child)).code).toBe(0)
  })
})

describe('enqueue --repo', () => {
  it('clones the repository for the task into fleet.workspaces_dir at the ref, and the task works there', async () => {
    const root = mkdtempSync(join(tmpdir(), 'ctxagent-repo-'))
    onTestFinished(() => rmSync(root, { recursive: true, force: true }))
    const git = (args: string[], cwd = root) =>
      execFileSync('git', args, {
        cwd,
        env: { ...process.env, GIT_AUTHOR_NAME: 't', GIT_AUTHOR_EMAIL: 't@t', GIT_COMMITTER_NAME: 't', GIT_COMMITTER_EMAIL: 't@t' },
      })
    const src = join(root, 'src')
    mkdirSync(src)
    git(['init', '--quiet', '-b', 'main'], src)
    writeFileSync(join(src, 'calc.js'), 'v1\n')
    git(['add', '.'], src)
    git(['commit', '--quiet', '-m', 'v1'], src)
    git(['tag', 'v1'], src)
    writeFileSync(join(src, 'calc.js'), 'v2\n')
    git(['commit', '--quiet', '-am', 'v2'], src)
    git(['clone', '--quiet', '--bare', src, join(root, 'calc.git')])
    const workspaces = join(root, 'workspaces')
    const s = await runSetup(`fleet:\n  workspaces_dir: ${workspaces}\n`)
    s.fake.fallback = () => finish
    const bad = await s.run(['enqueue', '--task', 'x', '--repo', 'not a url'], db())
    expect(bad).toMatchObject({
      code: 2,
      stderr:
        "ctxagent: --repo 'not a url' is not a git URL (give one like https://github.com/owner/repo.git#main, git@host:owner/repo.git or an absolute path)\n",
    })
    const both = await s.run(['enqueue', '--task', 'x', '--repo', join(root, 'calc.git'), '--workspace', s.ws], db())
    expect(both.code).toBe(2)
    const worker = startWorker(s, database.server.url)
    await started(worker)
    const uuid = await enqueue(s, database, ['--task', 'read calc.js', '--repo', `${join(root, 'calc.git')}#v1`])
    const missing = await enqueue(s, database, ['--task', 'x', '--repo', `${join(root, 'nothing.git')}`])
    await until(
      'both jobs ended',
      async () => (await query<{ n: number }>(`SELECT count(*)::int AS n FROM fleet_jobs WHERE state IN ('done', 'failed')`))[0]?.n === 2,
    )
    const task = readTask(s.tree, uuid)
    expect(task).toMatchObject({ location: 'completed', state: { status: 'completed' }, metadata: { run: { workspace: join(workspaces, uuid) } } })
    expect(readFileSync(join(workspaces, uuid, 'calc.js'), 'utf8')).toBe('v1\n')
    const failed = await query<{ outcome: string; error: string }>('SELECT outcome, error FROM fleet_jobs WHERE task_uuid = $1', [missing])
    expect(failed[0]?.outcome).toBe('failed')
    expect(failed[0]?.error).toMatch(/^the repository was not cloned: /)
    expect(existsSync(join(workspaces, missing))).toBe(false)
    worker.child.kill('SIGTERM')
    expect((await exitOf(worker.child)).code).toBe(0)
  })
})

/** The children of `pid` waiting as warm children (Linux: read from /proc); one handed its job shows its run's command line instead. */
function warmChildren(pid: number): number[] {
  const found = [] as number[]
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue
    try {
      const stat = readFileSync(`/proc/${name}/stat`, 'utf8')
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1])
      if (ppid === pid && readFileSync(`/proc/${name}/cmdline`, 'utf8').split('\0').includes('--warm-child')) found.push(Number(name))
    } catch {
      // gone meanwhile
    }
  }
  return found
}

describe('the warm child', () => {
  it('a job runs in the child the worker started ahead of it, and the next is started; one that dies idle is replaced', async () => {
    const s = await runSetup()
    s.fake.fallback = () => finish
    const worker = startWorker(s, database.server.url)
    const pid = worker.child.pid as number
    await started(worker)
    const [first] = await until('a warm child', async () => (warmChildren(pid).length === 1 ? warmChildren(pid) : null))
    // fleet.agent_niceness (5): its agents run behind the worker.
    expect(niceOf(first as number)).toBe(Math.min(19, niceOf(pid) + 5))
    // It has connected its task's index before there is a task.
    await until(
      'the warm child connected',
      async () =>
        (await query<{ n: number }>(`SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name LIKE $1`, [`ctxagent index %:${first}`]))[0]?.n ===
        1,
    )
    const doneJobs = (n: number) =>
      until(`${n} jobs done`, async () => (await query<{ n: number }>(`SELECT count(*)::int AS n FROM fleet_jobs WHERE state = 'done'`))[0]?.n === n)
    // The first task looks around until told to finish.
    // (A new pattern each time: the same call 5 times over is a stuck agent; and no turn budget to run out of meanwhile.)
    let more = true
    let n = 0
    s.fake.fallback = () => (more ? { calls: [{ name: 'glob', arguments: { pattern: `*${n++}*` } }] } : finish)
    const a = await enqueue(s, database, ['--task', 'task a', '--workspace', s.ws, '--max-turns', '1000000'])
    await until('task a under way', async () => agentRequests(s.fake).length >= 2)
    expect(worker.err()).toMatch(new RegExp(`job \\d+: starting task ${a} \\(pid ${first}\\)`))
    // ps shows the task's command line, not the warm child's.
    expect(readFileSync(`/proc/${first}/cmdline`, 'utf8')).toMatch(new RegExp(`^ctxagent run --uuid ${a} `))
    more = false
    await doneJobs(1)
    expect(readTask(s.tree, a)).toMatchObject({ location: 'completed', state: { status: 'completed' }, metadata: { process_id: first } })
    // Used once: its task ended with it, and another waits for the next job.
    const [second] = await until('the next warm child', async () =>
      warmChildren(pid).length === 1 && !warmChildren(pid).includes(first as number) ? warmChildren(pid) : null,
    )
    // Killed while it waits: the worker starts another, and the next job runs there.
    process.kill(second as number, 'SIGKILL')
    await until('the worker to notice', async () => worker.err().includes(`warm child (pid ${second}) exited idle (SIGKILL)`))
    const [third] = await until('a new warm child', async () =>
      warmChildren(pid).length === 1 && !warmChildren(pid).includes(second as number) ? warmChildren(pid) : null,
    )
    const b = await enqueue(s, database, ['--task', 'task b', '--workspace', s.ws])
    await doneJobs(2)
    expect(readTask(s.tree, b)).toMatchObject({ location: 'completed', state: { status: 'completed' }, metadata: { process_id: third } })
    expect(await query('SELECT outcome FROM fleet_jobs ORDER BY id')).toEqual([{ outcome: 'completed' }, { outcome: 'completed' }])
    // Stopped, the worker leaves no warm child behind.
    const [last] = await until('the next warm child', async () =>
      warmChildren(pid).length === 1 && !warmChildren(pid).includes(third as number) ? warmChildren(pid) : null,
    )
    worker.child.kill('SIGTERM')
    expect(await exitOf(worker.child)).toEqual({ code: 0, signal: null })
    await until('the last warm child to end', async () => !existsSync(`/proc/${last}`))
  })

  // Started while every slot is taken, a warm child waits for a job that cannot be claimed, its start-up taken from the task
  // that just began (docs/fleet.md#dispatch-latency).
  it('none waits while every slot is taken (concurrency 1); the next is started when its task ends', async () => {
    const s = await runSetup()
    let more = true
    let n = 0
    s.fake.fallback = () => (more ? { calls: [{ name: 'glob', arguments: { pattern: `*${n++}*` } }] } : finish)
    const worker = startWorker(s, database.server.url)
    const pid = worker.child.pid as number
    await started(worker)
    const [first] = await until('a warm child', async () => (warmChildren(pid).length === 1 ? warmChildren(pid) : null))
    const a = await enqueue(s, database, ['--task', 'task a', '--workspace', s.ws, '--max-turns', '1000000'])
    await until('task a under way', async () => agentRequests(s.fake).length >= 2)
    expect(worker.err()).toMatch(new RegExp(`job \\d+: starting task ${a} \\(pid ${first}\\)`))
    expect(warmChildren(pid)).toEqual([])
    more = false
    await until('task a done', async () => (await query<{ n: number }>(`SELECT count(*)::int AS n FROM fleet_jobs WHERE state = 'done'`))[0]?.n === 1)
    await until('the next warm child', async () => warmChildren(pid).length === 1 && !warmChildren(pid).includes(first as number))
    worker.child.kill('SIGTERM')
    expect(await exitOf(worker.child)).toEqual({ code: 0, signal: null })
  })

  /** A process's nice value (field 19 of /proc/<pid>/stat, after its name in parentheses). */
  function niceOf(pid: number): number {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8')
    return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[16])
  }

  // Started beside as many running tasks as there are cores, a warm child's start-up only takes their CPU.
  const cores = availableParallelism()
  it.runIf(cores <= 4)('none waits while as many tasks run as the host has cores; one is started again once they end', async () => {
    const s = await runSetup()
    let more = true
    let n = 0
    s.fake.fallback = () => (more ? { calls: [{ name: 'glob', arguments: { pattern: `*${n++}*` } }] } : finish)
    const worker = startWorker(s, database.server.url, ['--concurrency', String(cores + 1)])
    const pid = worker.child.pid as number
    await started(worker)
    await until('a warm child', async () => warmChildren(pid).length === 1)
    const marks = Array.from({ length: cores }, (_, i) => `look around, mark ${i}:`)
    for (const mark of marks) await enqueue(s, database, ['--task', mark, '--workspace', s.ws, '--max-turns', '1000000'])
    // Each task under way (its second request made): every one was started, and the last left no core for a warm child.
    await until('every task under way', async () =>
      marks.every((mark) => agentRequests(s.fake).filter((r) => JSON.stringify(r.body).includes(mark)).length >= 2),
    )
    expect(warmChildren(pid)).toEqual([])
    more = false
    await until('every job done', async () => (await query<{ n: number }>(`SELECT count(*)::int AS n FROM fleet_jobs WHERE state = 'done'`))[0]?.n === cores)
    await until('a warm child again', async () => warmChildren(pid).length === 1)
    worker.child.kill('SIGTERM')
    expect(await exitOf(worker.child)).toEqual({ code: 0, signal: null })
  })
})

describe.runIf(canUnshare)('host names in the fleet', () => {
  it('refuses a worker whose host name a live worker on another host already has', async () => {
    const s = await runSetup()
    const a = onHost(s, database.server.url, 'fleet-host-a')
    await until('the first worker', async () => a.err().includes('started on fleet-host-a'))
    const b = onHost(s, database.server.url, 'fleet-host-a')
    const { code } = await exitOf(b.unshare)
    expect(code).toBe(2)
    expect(b.err()).toMatch(
      /^ctxagent: another host named 'fleet-host-a' has a live worker \(fleet-host-a:1:[0-9a-f]+\) \(give each host of the fleet its own host name/,
    )
    expect(await query('SELECT hostname FROM fleet_workers')).toEqual([{ hostname: 'fleet-host-a' }])
    // The first worker is PID 1 of its namespace: SIGKILL from here ends the whole "host".
    process.kill(a.workerPid(), 'SIGTERM')
    expect((await exitOf(a.unshare)).code).toBe(0)
  })
})
