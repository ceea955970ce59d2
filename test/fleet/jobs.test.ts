import { spawnSync } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { dirname } from 'node:path'
import { describe, expect, it } from 'vitest'
import { exitOf } from '../helpers/wait.js'
import { agentPid, childrenOf, FAST_LOCKS, finish, killAtEnd, until } from '../helpers/fleet-hosts.js'
import { enqueue, started, startWorker, stopCleanly } from '../helpers/fleet-worker.js'
import { usePostgres } from '../helpers/use-postgres.js'
import { fleetJobs } from '../helpers/fleet-jobs.js'
import { cli } from '../helpers/run.js'
import { agentRequests, readTask, runSetup } from '../run/harness.js'
import type { RunSetup } from '../run/harness.js'

/** docs/contract.md §14.4: `ctxagent jobs` (list, show, cancel, retry), enqueue --key, its checks and flags, fleet.limits.per_user, retention. */
const database = usePostgres({ truncate: ['fleet_jobs', 'fleet_workers', 'tasks'] })
const query = database.query
const db = database.env

const jobs = () => fleetJobs(database)

/** A model that never finishes, except for the tasks whose text `done(text)` names. */
function endlessUnless(s: RunSetup, done: (messages: string) => boolean): void {
  let n = 0
  s.fake.fallback = (req) => (done(JSON.stringify(req.body.messages)) ? finish : { calls: [{ name: 'glob', arguments: { pattern: `*${n++}*` } }] })
}

describe('jobs cancel and retry', () => {
  it('a waiting job cancelled never runs; a running one pauses its task and is not retried; retry runs either again; a done one is refused', {
    timeout: 240_000,
  }, async () => {
    const s = await runSetup(FAST_LOCKS)
    let release = false
    endlessUnless(s, (m) => release && m.includes('"second"'))
    const first = await enqueue(s, database, ['--task', 'first', '--workspace', s.ws, '--max-turns', '1000000'])
    const second = await enqueue(s, database, ['--task', 'second', '--workspace', s.ws, '--max-turns', '1000000'])
    const [one, two] = await jobs()
    // Cancelled before any worker: it never runs.
    const cancelWaiting = await s.run(['jobs', 'cancel', String(two?.id)], db())
    expect(cancelWaiting.code, cancelWaiting.stderr).toBe(0)
    expect(cancelWaiting.stdout).toMatch(/cancelled \(it was waiting; it will not run\)/)
    const worker = await started(startWorker(s, database.server.url, ['--concurrency', '2']))
    await until('the first task under way', async () => agentRequests(s.fake).length >= 2 && agentPid(s, first) !== null)
    // The running one: its task pauses through the control request `pause` uses, and its job ends cancelled, no resume queued.
    const cancelRunning = await s.run(['jobs', 'cancel', String(one?.id), '--json'], db())
    expect(cancelRunning.code, cancelRunning.stderr).toBe(0)
    expect(JSON.parse(cancelRunning.stdout)).toEqual({ job: one?.id, task_uuid: first, state: 'cancelled', task: 'paused' })
    // What it printed is what the row says: the command waited for the worker to end the job.
    expect((await jobs())[0]?.state).toBe('cancelled')
    expect(readTask(s.tree, first)).toMatchObject({ location: 'paused', state: { paused_by: 'operator' } })
    expect((await jobs()).map((j) => [j.state, j.outcome])).toEqual([
      ['cancelled', 'paused'],
      ['cancelled', 'cancelled'],
    ])
    expect(JSON.stringify(agentRequests(s.fake).map((r) => r.body.messages))).not.toContain('"second"')
    // Cancelling a finished job is a conflict.
    const again = await s.run(['jobs', 'cancel', String(one?.id)], db())
    expect(again.code).toBe(4)
    expect(again.stderr).toMatch(/^ctxagent: job \d+ is cancelled already; there is nothing to cancel \(.*\)\n$/)
    // retry: the cancelled waiting job starts its task, the cancelled running one resumes its task.
    release = true
    expect((await s.run(['jobs', 'retry', String(two?.id)], db())).code).toBe(0)
    const done = await until('the second job done', async () => ((await jobs())[1]?.state === 'done' ? (await jobs())[1] : null))
    expect(done).toMatchObject({ kind: 'new', outcome: 'completed' })
    expect(readTask(s.tree, second).location).toBe('completed')
    const refused = await s.run(['jobs', 'retry', String(two?.id)], db())
    expect(refused.code).toBe(4)
    expect(refused.stderr).toMatch(/^ctxagent: job \d+ is done; only a failed, cancelled or retrying job is run again \(.*\)\n$/)
    const resumed = await s.run(['jobs', 'retry', String(one?.id), '--json'], db())
    expect(JSON.parse(resumed.stdout)).toMatchObject({ job: one?.id, kind: 'resume', state: 'waiting' })
    await until('the first task running again', async () => readTask(s.tree, first).location === 'running')
    await stopCleanly(worker)
    // Stopped by its worker: the job is done and its resume queued (a worker's stop is not a cancel).
    expect((await jobs()).map((j) => [j.task_uuid === first, j.kind, j.state])).toEqual([
      [true, 'resume', 'done'],
      [false, 'new', 'done'],
      [true, 'resume', 'waiting'],
    ])
  })

  it('ids, actions and filters are checked: exit 2 for bad input, 3 for a job that does not exist; the list filters and prints JSON Lines', {
    timeout: 120_000,
  }, async () => {
    const s = await runSetup(FAST_LOCKS)
    const a = await enqueue(s, database, ['--task', 'a', '--workspace', s.ws, '--user', 'alice'])
    await enqueue(s, database, ['--task', 'b', '--workspace', s.ws, '--user', 'bob'])
    for (const [args, code, message] of [
      [['jobs', 'show', 'x1'], 2, /^ctxagent: 'x1' is not a job id \(/],
      [['jobs', 'show', '-5'], 2, /^ctxagent: /],
      [['jobs', 'cancel'], 2, /^ctxagent: jobs cancel needs a job id \(/],
      [['jobs', 'drop', '1'], 2, /^ctxagent: jobs: unknown action 'drop' \(/],
      [
        ['jobs', '--state', 'sleeping'],
        2,
        /^ctxagent: --state 'sleeping' is not a job state \(give one of waiting, running, retrying, done, failed, cancelled\)/,
      ],
      [['jobs', 'show', '999999'], 3, /^ctxagent: there is no job 999999 \(/],
      [['jobs', 'retry', '999999'], 3, /^ctxagent: there is no job 999999 \(/],
    ] as const) {
      const res = await s.run([...args], db())
      expect(res.code, `${args.join(' ')}: ${res.stderr}`).toBe(code)
      expect(res.stderr).toMatch(message)
      expect(res.stderr.trim().split('\n')).toHaveLength(1)
    }
    const alice = await s.run(['jobs', '--user', 'alice', '--json'], db())
    const rows = alice.stdout
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { task_uuid: string; user: string; state: string; attempts: number })
    expect(rows).toEqual([expect.objectContaining({ task_uuid: a, user: 'alice', state: 'waiting', attempts: 0 })])
    expect((await s.run(['jobs', '--task', a.slice(0, 8), '--json'], db())).stdout.trim().split('\n')).toHaveLength(1)
    expect((await s.run(['jobs', '--state', 'done', '--json'], db())).stdout).toBe('')
    const human = await s.run(['jobs', '--limit', '1'], db())
    expect(human.code).toBe(0)
    expect(human.stdout).toMatch(/bob/)
    expect(
      human.stdout
        .split('\n')
        .slice(0, 2)
        .map((l) => l.split('\t').length),
    ).toEqual([12, 12]) // piped: a header row, then tab-separated rows
    expect(human.stdout).not.toMatch(/alice/)
    // Without a database: one line, exit 2.
    const none = await s.run(['jobs'])
    expect(none.code).toBe(2)
    expect(none.stderr).toMatch(/^ctxagent: jobs needs the fleet's PostgreSQL database \(/)
  })
})

describe('enqueue', () => {
  it('--key: while its job is open, and for fleet.key_retention_hours after it ended done, a second enqueue queues nothing and says which job it returned; past that the key queues again', {
    timeout: 180_000,
  }, async () => {
    const s = await runSetup(FAST_LOCKS)
    const first = await enqueue(s, database, ['--task', 'nightly', '--workspace', s.ws, '--key', 'nightly-1'])
    const second = await s.run(['enqueue', '--task', 'nightly again', '--workspace', s.ws, '--key', 'nightly-1'], db())
    expect(second.code, second.stderr).toBe(0)
    expect(second.stdout.trim()).toBe(first)
    expect(second.stderr).toMatch(/with key 'nightly-1' is waiting already; nothing queued/)
    const json = await s.run(['enqueue', '--task', 'x', '--workspace', s.ws, '--key', 'nightly-1', '--json'], db())
    expect(JSON.parse(json.stdout)).toMatchObject({ uuid: first, queued: false })
    expect(await jobs()).toHaveLength(1)
    s.fake.fallback = () => finish
    const worker = await started(startWorker(s, database.server.url))
    await until('the job done', async () => (await jobs())[0]?.state === 'done')
    // A cron run landing just after the job ended: the key is kept (24 h by default), the done job returned and named.
    const late = await s.run(['enqueue', '--task', 'nightly', '--workspace', s.ws, '--key', 'nightly-1'], db())
    expect(late.code, late.stderr).toBe(0)
    expect(late.stdout.trim()).toBe(first)
    const firstId = (await jobs())[0]?.id
    expect(late.stderr).toMatch(
      new RegExp(`job ${firstId} with key 'nightly-1' ended done at \\S+ \\(keys are kept 24 h after, fleet.key_retention_hours\\); nothing queued`),
    )
    const lateJson = await s.run(['enqueue', '--task', 'nightly', '--workspace', s.ws, '--key', 'nightly-1', '--json'], db())
    expect(JSON.parse(lateJson.stdout)).toMatchObject({ uuid: first, job: firstId, queued: false, state: 'done' })
    expect(await jobs()).toHaveLength(1)
    // The database's clock is the one that counts: the job's end moved back past the retention, the key queues again.
    await query(`UPDATE fleet_jobs SET finished_at = now() - interval '25 hours'`)
    const third = await enqueue(s, database, ['--task', 'nightly', '--workspace', s.ws, '--key', 'nightly-1'])
    expect(third).not.toBe(first)
    expect(await jobs()).toHaveLength(2)
    await stopCleanly(worker)
  })

  it('refuses before queuing what run would refuse: a workspace holding the tree or inside it, a missing one; nothing queued', {
    timeout: 120_000,
  }, async () => {
    const s = await runSetup(FAST_LOCKS)
    for (const [args, message] of [
      [['--task', 'x'], /^ctxagent: the workspace .* contains the task tree .*; the agent could read or delete its own task files \(/],
      [['--task', 'x', '--workspace', s.tree.base], /^ctxagent: the workspace .* contains the task tree/],
      [['--task', 'x', '--workspace', `${s.tree.base}/running`], /^ctxagent: the workspace .* is inside the task tree/],
      [['--task', 'x', '--workspace', '/nonexistent/ws'], /^ctxagent: the workspace \/nonexistent\/ws is not a directory here \(/],
      [['--task', 'x', '--workspace', s.ws, '--max-turns', '0'], /^ctxagent: /],
      [['--task', 'x', '--workspace', s.ws, '--key', ''], /^ctxagent: --key must be 1 to 200 printable characters \(/],
    ] as const) {
      // Run from the directory above the tree: without --workspace, the current directory holds the tree.
      const res = cli(['enqueue', ...args, '--home', s.tree.base, '--config', s.config], db(), dirname(s.tree.base))
      expect(res.code, `${args.join(' ')}: ${res.stderr}`).toBe(2)
      expect(res.stderr).toMatch(message)
    }
    expect(await jobs()).toEqual([])
  })

  it('passes --model, --allow-shell and the budgets to the task, and records whose job it is', { timeout: 180_000 }, async () => {
    const s = await runSetup(`${FAST_LOCKS}tools:\n  sandbox: none\n`)
    s.fake.fallback = () => finish
    const uuid = await enqueue(s, database, [
      '--task',
      'x',
      '--workspace',
      s.ws,
      '--model',
      'other-model',
      '--allow-shell',
      '--max-turns',
      '7',
      '--user',
      'carol',
    ])
    expect((await jobs())[0]).toMatchObject({ user: 'carol', spec: { model: 'other-model', allow_shell: true, max_turns: 7, user: 'carol' } })
    const worker = await started(startWorker(s, database.server.url))
    await until('the job done', async () => (await jobs())[0]?.state === 'done')
    const first = agentRequests(s.fake)[0]
    expect(first?.body.model).toBe('other-model')
    expect(JSON.stringify(first?.body.tools)).toContain('run_command')
    expect(readTask(s.tree, uuid).metadata).toMatchObject({ user: 'carol' })
    await stopCleanly(worker)
  })
})

describe('fleet.limits.per_user', () => {
  // The job's user is the one its task runs for: without --user, the OS user who queued it goes in the spec too, or
  // the worker's `run` would take its own OS user (the caps it checks, the spend it adds, the resume's user).
  it('without --user, the OS user who queued the job is its task’s user too (in the spec its worker runs)', { timeout: 60_000 }, async () => {
    const s = await runSetup(`${FAST_LOCKS}tools:\n  sandbox: none\n`)
    await enqueue(s, database, ['--task', 'x', '--workspace', s.ws])
    const [job] = await jobs()
    expect(job?.user).toEqual(expect.any(String))
    expect(job?.spec.user).toBe(job?.user)
  })

  it("one user's batch cannot take every slot: at most per_user of their tasks run fleet-wide, another user's job runs beside", {
    timeout: 240_000,
  }, async () => {
    const s = await runSetup(`${FAST_LOCKS}  limits:\n    per_user: 1\n`)
    endlessUnless(s, () => false)
    const alice = [] as string[]
    for (const t of ['a1', 'a2', 'a3']) alice.push(await enqueue(s, database, ['--task', t, '--workspace', s.ws, '--user', 'alice', '--max-turns', '1000000']))
    const bob = await enqueue(s, database, ['--task', 'b1', '--workspace', s.ws, '--user', 'bob', '--max-turns', '1000000'])
    // Two workers with room for six tasks: only the limit holds alice's back.
    const workers = [
      await started(startWorker(s, database.server.url, ['--concurrency', '3'])),
      await started(startWorker(s, database.server.url, ['--concurrency', '3'])),
    ]
    const running = () => query<{ user: string; task_uuid: string }>(`SELECT "user", task_uuid FROM fleet_jobs WHERE state = 'running' ORDER BY id`)
    await until('alice and bob each running', async () => {
      const rows = await running()
      return rows.some((r) => r.user === 'bob') && rows.some((r) => r.user === 'alice') && agentPid(s, bob) !== null
    })
    // A later job of another user, behind alice's two waiting ones, is claimed: claims passed alice's over.
    const dave = await enqueue(s, database, ['--task', 'd1', '--workspace', s.ws, '--user', 'dave', '--max-turns', '1000000'])
    await until("dave's job running", async () => (await running()).some((r) => r.task_uuid === dave))
    const rows = await running()
    expect(rows.filter((r) => r.user === 'alice')).toHaveLength(1)
    expect(rows.filter((r) => r.user === 'bob')).toHaveLength(1)
    // Alice's running one cancelled: the next of hers starts.
    const [runningAlice] = rows.filter((r) => r.user === 'alice')
    const id = (await query<{ id: string }>(`SELECT id FROM fleet_jobs WHERE task_uuid = $1 AND state = 'running'`, [runningAlice?.task_uuid]))[0]?.id
    expect((await s.run(['jobs', 'cancel', String(id)], db())).code).toBe(0)
    await until("alice's next task running", async () => (await running()).some((r) => r.user === 'alice' && r.task_uuid !== runningAlice?.task_uuid))
    expect((await running()).filter((r) => r.user === 'alice')).toHaveLength(1)
    for (const w of workers) await stopCleanly(w)
  })
})

describe('workers and retention', () => {
  it('fleet shows live workers and counts dead ones; cleanup expires finished jobs and dead workers past fleet.retention_days, never an open job', {
    timeout: 180_000,
  }, async () => {
    const s = await runSetup(`${FAST_LOCKS}  retention_days: 1\n`)
    s.fake.fallback = () => finish
    const dead = await started(startWorker(s, database.server.url))
    dead.child.kill('SIGKILL')
    await exitOf(dead.child)
    const live = await started(startWorker(s, database.server.url))
    await enqueue(s, database, ['--task', 'x', '--workspace', s.ws])
    await until('the job done', async () => (await jobs())[0]?.state === 'done')
    const status = await until('the killed worker dead', async () => {
      const res = JSON.parse((await s.run(['fleet', '--json'], db())).stdout) as { workers: { pid: number }[]; dead_workers: number }
      return res.dead_workers === 1 ? res : null
    })
    expect(status.workers.map((w) => w.pid)).toEqual([live.child.pid])
    expect((await s.run(['fleet'], db())).stdout).toMatch(/Workers: 1 live, 1 dead/)
    await stopCleanly(live)
    await enqueue(s, database, ['--task', 'open', '--workspace', s.ws])
    // Two days on, by the database's clock as cleanup sees it: rows finished or silent before then.
    await query(`UPDATE fleet_jobs SET created_at = created_at - interval '2 days', finished_at = finished_at - interval '2 days'`)
    await query(`UPDATE fleet_workers SET heartbeat_at = heartbeat_at - interval '2 days', stopped_at = stopped_at - interval '2 days' WHERE pid = $1`, [
      dead.child.pid,
    ])
    const dry = await s.run(['cleanup', '--dry-run', '--json'], db())
    expect(JSON.parse(dry.stdout)).toMatchObject({ fleet_rows: { jobs: 1, workers: 1 } })
    const res = await s.run(['cleanup', '--json'], db())
    expect(res.code, res.stderr).toBe(0)
    expect(JSON.parse(res.stdout)).toMatchObject({ fleet_rows: { jobs: 1, workers: 1 } })
    expect((await jobs()).map((j) => j.state)).toEqual(['waiting'])
    // The worker stopped just now stays (its row is recent).
    expect(await query('SELECT id FROM fleet_workers')).toHaveLength(1)
  })

  it('a warm child waiting for its job exits when its worker is SIGKILLed', { timeout: 120_000 }, async () => {
    const s = await runSetup(FAST_LOCKS)
    const worker = await started(startWorker(s, database.server.url))
    const warm = await until('the warm child', async () => childrenOf(worker.child.pid)[0] ?? null)
    killAtEnd(warm)
    worker.child.kill('SIGKILL')
    await exitOf(worker.child)
    await until('the orphaned warm child gone', async () => !living(warm)).catch((err: Error) => {
      throw new Error(
        `${err.message}: ${spawnSync('ps', ['-o', 'pid,ppid,stat,args', '-p', String(warm)]).stdout.toString()} ${spawnSync('ls', ['-l', `/proc/${warm}/fd`]).stdout.toString()}`,
      )
    })
  })
})

/** Whether `pid` runs (a zombie, exited and not yet reaped by whoever adopted it, does not). */
function living(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8')
    return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) !== 'Z'
  } catch {
    return false
  }
}
