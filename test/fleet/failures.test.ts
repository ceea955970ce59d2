import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { hostname, tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, expect, it, onTestFinished } from 'vitest'
import { alive, exitOf } from '../helpers/wait.js'
import { agentPid, canUnshare, coldStartFlags, endless, FAST_LOCKS, finish, killAtEnd, onHost, until } from '../helpers/fleet-hosts.js'
import { enqueue, started, startWorker, stopCleanly } from '../helpers/fleet-worker.js'
import { usePostgres } from '../helpers/use-postgres.js'
import { fleetJobs } from '../helpers/fleet-jobs.js'
import type { JobRow } from '../helpers/fleet-jobs.js'
import { agentRequests, expectContinuousSeq, readTask, runSetup } from '../run/harness.js'
import type { RunSetup } from '../run/harness.js'

/**
 * What the fleet does on each kind of failure (docs/contract.md §14.3, §12.3): agents killed again
 * and again, a worker killed under a live agent, pauses by operators and by signals, a
 * resume on another host, agents killed before their task began.
 */
const database = usePostgres({ truncate: ['fleet_jobs', 'fleet_workers', 'tasks'] })
const query = database.query
const db = database.env

const jobs = () => fleetJobs(database)

/** Every job, once all of them have ended (done, or failed after their last attempt). */
const settledJobs = () =>
  until('every job ended', async () => {
    const all = await jobs()
    return all.every((j) => ['done', 'failed', 'cancelled'].includes(j.state)) ? all : null
  })

/** One watch-locks pass from this host (a host that runs no agent). */
async function watchLocks(s: RunSetup): Promise<string> {
  const res = await s.run(['watch-locks', '--once'], db())
  return res.stdout + res.stderr
}

/** The agent (`ctxagent run`) that holds the task now, other than those in `not`. */
async function agentOf(s: RunSetup, uuid: string, not: number[] = []): Promise<number> {
  return until('the task’s agent', async () => {
    const pid = agentPid(s, uuid)
    return pid !== null && !not.includes(pid) ? pid : null
  })
}

describe('fleet.recovery: resume and fleet.max_attempts', () => {
  it('a task whose agent is SIGKILLed on every attempt is resumed until max_attempts, then failed with the reason; fleet --json counts each', {
    timeout: 180_000,
  }, async () => {
    const s = await runSetup(`${FAST_LOCKS}  max_attempts: 3\n`)
    endless(s)
    const worker = await started(startWorker(s, database.server.url))
    const uuid = await enqueue(s, database, ['--task', 'look around', '--workspace', s.ws, '--max-turns', '1000000'])
    const killed: number[] = []
    for (let attempt = 1; attempt <= 3; attempt++) {
      const asked = agentRequests(s.fake).length
      const agent = await agentOf(s, uuid, killed)
      // Killed once it works on the task (its request made: the task is in running/, its lock held).
      await until(`attempt ${attempt} under way`, async () => agentRequests(s.fake).length > asked)
      process.kill(agent, 'SIGKILL')
      killed.push(agent)
      await until(`attempt ${attempt} recovered`, async () => {
        await watchLocks(s)
        return (await jobs()).filter((j) => j.state === 'done').length === attempt
      })
    }
    const rows = await jobs()
    expect(rows.map((j) => [j.kind, j.state, j.outcome])).toEqual([
      ['new', 'done', 'died'],
      ['resume', 'done', 'died'],
      ['resume', 'done', 'failed'],
    ])
    // The job says why, as the task does.
    for (const died of rows.slice(0, 2)) expect(died.error).toMatch(/^agent died: pid \d+ on .*; paused to be resumed$/)
    const last = rows[2] as JobRow
    expect(last.error).toMatch(/^agent died: pid \d+ on .* \(attempt 3 of fleet\.max_attempts 3\)$/)
    const task = readTask(s.tree, uuid)
    expect(task).toMatchObject({ location: 'completed', state: { status: 'failed' } })
    expect(last.error?.startsWith(String(task.state.error))).toBe(true)
    expectContinuousSeq(task.messages)
    const status = JSON.parse((await s.run(['fleet', '--json'], db())).stdout) as { jobs: unknown; outcomes: unknown }
    expect(status).toMatchObject({ jobs: { waiting: 0, running: 0, done: 3 }, outcomes: { died: 2, failed: 1 } })
    await stopCleanly(worker)
  })
})

describe('a worker SIGKILLed under a live agent', () => {
  it('the agent does not die of its closed stderr: it finishes, and the job is settled once, never run again while its lock lives', {
    timeout: 180_000,
  }, async () => {
    const s = await runSetup(FAST_LOCKS)
    let go = false
    let n = 0
    // Two turns: the second (and the agent's log lines after it) only once its worker is gone.
    s.fake.fallback = (req) =>
      req.body.messages.some((m) => m.role === 'tool')
        ? { delayMs: go ? 0 : 200, ...(go ? finish : { calls: [{ name: 'glob', arguments: { pattern: `*${n++}*` } }] }) }
        : { calls: [{ name: 'glob', arguments: { pattern: '*.js' } }] }
    const first = await started(startWorker(s, database.server.url))
    const uuid = await enqueue(s, database, ['--task', 'look around', '--workspace', s.ws, '--max-turns', '1000000'])
    await until('the task under way', async () => agentRequests(s.fake).length >= 2)
    const agent = await agentOf(s, uuid)
    killAtEnd(agent)
    first.child.kill('SIGKILL')
    await exitOf(first.child)
    // Another worker, and watch-locks, while the orphaned agent still works: its lock is live, so nobody takes its job.
    const second = startWorker(s, database.server.url)
    await until('the second worker to start', async () => second.err().includes('started on'))
    const during = agentRequests(s.fake).length
    await until('the orphan’s next turns', async () => agentRequests(s.fake).length >= during + 2)
    expect(await watchLocks(s)).not.toMatch(/reaped|died/)
    expect((await jobs()).map((j) => [j.state, j.outcome])).toEqual([['running', null]])
    go = true
    await until('the orphaned agent to end', async () => !alive(agent))
    const task = readTask(s.tree, uuid)
    expect(task).toMatchObject({ location: 'completed', state: { status: 'completed' } })
    expectContinuousSeq(task.messages)
    expect(task.tools.filter((t) => t.tool_name === 'finish')).toHaveLength(1)
    const settled = await until('the dead worker’s job settled', async () => {
      await watchLocks(s)
      const rows = await jobs()
      return rows.every((j) => j.state === 'done') ? rows : null
    })
    expect(settled.map((j) => [j.kind, j.outcome])).toEqual([['new', 'completed']])
    expect(second.err()).not.toMatch(/starting task|resuming task/)
    await stopCleanly(second)
  })
})

describe('pauses by an operator and by a signal', () => {
  it('with its worker dead, a task paused by `pause` stays paused; one paused by SIGTERM is queued again; state.json says who paused it', {
    timeout: 180_000,
  }, async () => {
    const s = await runSetup(FAST_LOCKS)
    endless(s)
    const worker = await started(startWorker(s, database.server.url, ['--concurrency', '2']))
    // Endless indeed: at a few ms a turn (a warm agent, a zero-latency LLM) run.max_turns' 100 are over before `pause` has started.
    const byOperator = await enqueue(s, database, ['--task', 'one', '--workspace', s.ws, '--max-turns', '1000000'])
    const bySignal = await enqueue(s, database, ['--task', 'two', '--workspace', s.ws, '--max-turns', '1000000'])
    await until('both tasks at work', async () => {
      const asked = new Set(agentRequests(s.fake).map((r) => JSON.stringify(r.body.messages).match(/"(one|two)"/)?.[1]))
      return asked.has('one') && asked.has('two')
    })
    const agents = [await agentOf(s, byOperator), await agentOf(s, bySignal)]
    for (const pid of agents) killAtEnd(pid)
    worker.child.kill('SIGKILL')
    await exitOf(worker.child)
    expect((await s.run(['pause', byOperator])).code).toBe(0)
    process.kill(agents[1] as number, 'SIGTERM')
    await until("the operator's pause", async () => readTask(s.tree, byOperator).location === 'paused')
    expect(readTask(s.tree, byOperator).state.paused_by).toBe('operator')
    const rows = await until('both jobs settled', async () => {
      await watchLocks(s)
      const all = await jobs()
      return all.filter((j) => j.state === 'done').length === 2 ? all : null
    })
    // Its agent paused as it does under a live worker (once it died of an unhandled rejection when the
    // SIGTERM came while a compaction read its window, before the summary request: exit 1, left in running/).
    const signalled = readTask(s.tree, bySignal)
    expect(signalled.location).toBe('paused')
    expect(signalled.state.paused_by).toBe('signal')
    expect(rows).toMatchObject([
      { task_uuid: byOperator, kind: 'new', state: 'done', outcome: 'paused' },
      { task_uuid: bySignal, kind: 'new', state: 'done', outcome: 'paused' },
      { task_uuid: bySignal, kind: 'resume', state: 'waiting', outcome: null },
    ])
  })
})

/**
 * Holds `ctxagent run` processes of a worker before they do anything (a preloaded
 * module that blocks while a file exists), so that a test can kill an agent that
 * certainly has not begun its task.
 */
function holdAgents(kind: 'new' | 'resume'): { env: Record<string, string>; held: () => number | null; release: () => void } {
  const dir = mkdtempSync(join(tmpdir(), 'ctxagent-hold-'))
  onTestFinished(() => rmSync(dir, { recursive: true, force: true }))
  const gate = join(dir, 'gate')
  const pidFile = join(dir, 'pid')
  writeFileSync(gate, '')
  const flag = kind === 'new' ? '--uuid' : '--resume'
  writeFileSync(
    join(dir, 'hold.mjs'),
    `import { existsSync, writeFileSync } from 'node:fs'\n` +
      `if (process.argv.includes('run') && process.argv.includes(${JSON.stringify(flag)}) && existsSync(${JSON.stringify(gate)})) {\n` +
      `  writeFileSync(${JSON.stringify(pidFile)}, String(process.pid))\n` +
      `  while (existsSync(${JSON.stringify(gate)})) Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 20)\n` +
      `}\n`,
  )
  return {
    env: { NODE_OPTIONS: `--import ${join(dir, 'hold.mjs')}` },
    held: () => (existsSync(pidFile) ? Number(readFileSync(pidFile, 'utf8')) : null),
    release: () => rmSync(gate, { force: true }),
  }
}

function startHeldWorker(s: RunSetup, env: Record<string, string>) {
  const saved = process.env.NODE_OPTIONS
  process.env.NODE_OPTIONS = env.NODE_OPTIONS
  try {
    return startWorker(s, database.server.url, coldStartFlags())
  } finally {
    if (saved === undefined) delete process.env.NODE_OPTIONS
    else process.env.NODE_OPTIONS = saved
  }
}

describe('agents killed before their task began (a live worker)', () => {
  it('a new job’s agent SIGKILLed before it created its task: the job waits again, the attempt counted, and runs', { timeout: 120_000 }, async () => {
    const s = await runSetup(FAST_LOCKS)
    s.fake.fallback = () => finish
    const hold = holdAgents('new')
    const worker = await started(startHeldWorker(s, hold.env))
    const uuid = await enqueue(s, database, ['--task', 'look around', '--workspace', s.ws, '--max-turns', '1000000'])
    const agent = await until('the held agent', async () => hold.held())
    expect(s.tree.layout.list('running')).toEqual([])
    hold.release()
    process.kill(agent, 'SIGKILL')
    const rows = await settledJobs()
    expect(rows.map((j) => [j.kind, j.outcome, j.attempts])).toEqual([['new', 'completed', 2]])
    expect(readTask(s.tree, uuid)).toMatchObject({ location: 'completed', state: { status: 'completed' } })
    await stopCleanly(worker)
  })

  it('killed before its task began as often as fleet.max_attempts allows: the job ends failed, saying so', { timeout: 120_000 }, async () => {
    const s = await runSetup(`${FAST_LOCKS}  max_attempts: 1\n`)
    const hold = holdAgents('new')
    const worker = await started(startHeldWorker(s, hold.env))
    await enqueue(s, database, ['--task', 'look around', '--workspace', s.ws, '--max-turns', '1000000'])
    const agent = await until('the held agent', async () => hold.held())
    process.kill(agent, 'SIGKILL')
    const rows = await settledJobs()
    expect(rows.map((j) => [j.kind, j.outcome, j.attempts, j.error])).toEqual([
      ['new', 'failed', 1, 'its agent was killed (SIGKILL) before the task began (attempt 1 of fleet.max_attempts 1)'],
    ])
    expect(agentRequests(s.fake)).toEqual([])
    hold.release()
    await stopCleanly(worker)
  })

  it('a resume’s agent SIGKILLed before it took the task from paused/: the job waits again, the attempt counted, and resumes it', {
    timeout: 120_000,
  }, async () => {
    const s = await runSetup(FAST_LOCKS)
    endless(s)
    const run = s.start(['run', '--task', 'look around', '--workspace', s.ws, '--max-turns', '1000000'])
    await until('the task under way', async () => agentRequests(s.fake).length >= 2)
    run.child.kill('SIGTERM')
    expect((await exitOf(run.child)).code).toBe(143)
    const uuid = readTask(s.tree, s.tree.layout.list('paused')[0] as string).uuid
    s.fake.fallback = () => finish
    const hold = holdAgents('resume')
    const worker = await started(startHeldWorker(s, hold.env))
    expect(await enqueue(s, database, ['--resume', uuid])).toBe(uuid)
    const agent = await until('the held agent', async () => hold.held())
    hold.release()
    process.kill(agent, 'SIGKILL')
    const rows = await settledJobs()
    expect(rows.map((j) => [j.kind, j.outcome, j.attempts])).toEqual([['resume', 'completed', 2]])
    expect(readTask(s.tree, uuid)).toMatchObject({ location: 'completed', state: { status: 'completed' } })
    await stopCleanly(worker)
  })
})

/**
 * Holds a worker's agent inside task creation: at the first state.json write (its lock's
 * mkdir), the task's directory already in running/, until the agent gets SIGWINCH. The wait
 * is asynchronous, as every await of a real creation is. A signal sent before that SIGWINCH
 * is delivered and dispatched before it (lower numbers first, then in order).
 */
function holdInCreation(): { env: Record<string, string>; held: () => number | null } {
  const dir = mkdtempSync(join(tmpdir(), 'ctxagent-hold-'))
  onTestFinished(() => rmSync(dir, { recursive: true, force: true }))
  const pidFile = join(dir, 'pid')
  writeFileSync(
    join(dir, 'hold.mjs'),
    `import fs from 'node:fs'\n` +
      `if (process.argv.includes('run')) {\n` +
      `  const mkdir = fs.mkdir\n` +
      `  let held = false\n` +
      `  fs.mkdir = (path, ...rest) => {\n` +
      `    if (held || !/\\/running\\/[^/]+\\/\\.state\\.lock$/.test(String(path))) return mkdir(path, ...rest)\n` +
      `    held = true\n` +
      `    const alive = setInterval(() => undefined, 1000)\n` +
      `    process.once('SIGWINCH', () => (clearInterval(alive), mkdir(path, ...rest)))\n` +
      `    fs.writeFileSync(${JSON.stringify(pidFile)}, String(process.pid))\n` +
      `  }\n` +
      `}\n`,
  )
  return {
    env: { NODE_OPTIONS: `--import ${join(dir, 'hold.mjs')}` },
    held: () => (existsSync(pidFile) ? Number(readFileSync(pidFile, 'utf8')) : null),
  }
}

describe('a worker stopped while its agent creates the task', () => {
  it('the agent pauses the task it was creating (paused_by signal), its resume is queued, the worker exits 0', { timeout: 120_000 }, async () => {
    const s = await runSetup(FAST_LOCKS)
    endless(s)
    const hold = holdInCreation()
    const worker = await started(startHeldWorker(s, hold.env))
    const uuid = await enqueue(s, database, ['--task', 'look around', '--workspace', s.ws, '--max-turns', '1000000'])
    const agent = await until('the agent inside task creation', async () => hold.held())
    expect(s.tree.layout.list('running')).toEqual([uuid])
    // What the stopping worker does (its SIGTERM to the agent's group), done here so that it certainly comes
    // while the agent creates its task; the worker's own comes after it.
    process.kill(-agent, 'SIGTERM')
    process.kill(agent, 'SIGWINCH')
    await stopCleanly(worker)
    // (Killed by the signal instead, it left running/<uuid> with no state.json and no lock.)
    expect([s.tree.layout.list('running'), s.tree.layout.list('paused')]).toEqual([[], [uuid]])
    expect(readTask(s.tree, uuid)).toMatchObject({ location: 'paused', state: { status: 'paused', paused_by: 'signal' } })
    expect(agentRequests(s.fake)).toEqual([])
    const rows = await jobs()
    expect(rows.map((j) => [j.kind, j.state, j.outcome])).toEqual([
      ['new', 'done', 'paused'],
      ['resume', 'waiting', null],
    ])
  })
})

/** A task paused by SIGTERM whose lock a live process of this host (the test) then holds. */
async function pausedAndLocked(s: RunSetup): Promise<{ uuid: string; lock: string }> {
  endless(s)
  const run = s.start(['run', '--task', 'look around', '--workspace', s.ws, '--max-turns', '1000000'])
  await until('the task under way', async () => agentRequests(s.fake).length >= 2)
  run.child.kill('SIGTERM')
  expect((await exitOf(run.child)).code).toBe(143)
  const uuid = s.tree.layout.list('paused')[0] as string
  const lock = join(s.tree.layout.taskDir('paused', uuid), '.lock')
  const now = new Date().toISOString()
  writeFileSync(lock, JSON.stringify({ process_id: process.pid, hostname: hostname(), acquired_at: now, heartbeat_at: now, token: 'held-by-the-test' }))
  return { uuid, lock }
}

describe('a resume that finds its paused task locked', () => {
  it('(a compress by an operator, a lock a killed resume left) hands the job back, the attempt counted, and resumes once the lock is gone', {
    timeout: 120_000,
  }, async () => {
    const s = await runSetup(`${FAST_LOCKS}  max_attempts: 1000\n`)
    const { uuid, lock } = await pausedAndLocked(s)
    s.fake.fallback = () => finish
    const worker = await started(startWorker(s, database.server.url))
    expect(await enqueue(s, database, ['--resume', uuid])).toBe(uuid)
    await until('a resume handed back', async () => worker.err().includes('found the task locked before task'))
    rmSync(lock)
    const rows = await settledJobs()
    expect(rows.map((j) => [j.kind, j.outcome])).toEqual([['resume', 'completed']])
    expect(rows[0]?.attempts).toBeGreaterThanOrEqual(2)
    expect(readTask(s.tree, uuid)).toMatchObject({ location: 'completed', state: { status: 'completed' } })
    await stopCleanly(worker)
  })
})

describe('a resume locked out as often as fleet.max_attempts allows', () => {
  it('ends its job paused, saying why, and leaves the task as it was', { timeout: 120_000 }, async () => {
    const s = await runSetup(`${FAST_LOCKS}  max_attempts: 2\n`)
    const { uuid } = await pausedAndLocked(s)
    const before = readTask(s.tree, uuid)
    const worker = await started(startWorker(s, database.server.url))
    expect(await enqueue(s, database, ['--resume', uuid])).toBe(uuid)
    const rows = await settledJobs()
    expect(rows.map((j) => [j.kind, j.outcome, j.attempts, j.error])).toEqual([
      ['resume', 'paused', 2, 'its agent found the task locked before the task began (attempt 2 of fleet.max_attempts 2)'],
    ])
    const after = readTask(s.tree, uuid)
    expect([after.location, after.state, after.messages]).toEqual([before.location, before.state, before.messages])
    await stopCleanly(worker)
  })
})

describe.runIf(canUnshare)('enqueue --resume on another host', () => {
  it('a task paused on host a resumes on host b exactly: seq, counters, window, and a comment made while paused read once', { timeout: 180_000 }, async () => {
    const s = await runSetup(FAST_LOCKS)
    endless(s)
    const a = onHost(s, database.server.url, 'fleet-a')
    await until('host a', async () => a.err().includes('started on fleet-a'))
    const uuid = await enqueue(s, database, ['--task', 'look around', '--workspace', s.ws, '--max-turns', '1000000'])
    await until('the task under way on host a', async () => agentRequests(s.fake).length >= 3)
    expect((await s.run(['pause', uuid])).code).toBe(0)
    await until('the job ended paused', async () => (await jobs())[0]?.outcome === 'paused')
    process.kill(a.workerPid(), 'SIGTERM')
    expect((await exitOf(a.unshare)).code).toBe(0)
    const before = readTask(s.tree, uuid)
    expect(before).toMatchObject({ location: 'paused', metadata: { hostname: 'fleet-a' } })
    const lastBefore = agentRequests(s.fake).at(-1)?.body.messages ?? []
    const asked = agentRequests(s.fake).length
    expect((await s.run(['comment', uuid, 'please also check README.md'])).code).toBe(0)

    // The resume on host b: one more look, then finish.
    s.fake.fallback = (req) =>
      agentRequests(s.fake).length > asked + 1 ? finish : { calls: [{ name: 'glob', arguments: { pattern: `*${req.body.messages.length}*` } }] }
    const b = onHost(s, database.server.url, 'fleet-b')
    await until('host b', async () => b.err().includes('started on fleet-b'))
    expect(await enqueue(s, database, ['--resume', uuid])).toBe(uuid)
    await until('the resume completed on host b', async () => readTask(s.tree, uuid).state.status === 'completed')
    const after = readTask(s.tree, uuid)
    expectContinuousSeq(after.messages)
    // What was there is there unchanged, and continues.
    expect(after.messages.slice(0, before.messages.length)).toEqual(before.messages)
    const comment = after.messages.filter((m) => String(m.content).includes('please also check README.md'))
    expect(comment).toHaveLength(1)
    const resumed = agentRequests(s.fake).slice(asked)
    expect(resumed.length).toBeGreaterThanOrEqual(2)
    // The window continues: the first request after the resume is the last one before it, plus what came since (the last turn, the comment).
    const firstAfter = resumed[0]?.body.messages ?? []
    // (An older tool result may be pruned by now: one turn more has passed, as it would have without the pause.)
    const asPruned = lastBefore.map((m, i) => (m.role === 'tool' && firstAfter[i]?.content === '[pruned]' ? { ...m, content: '[pruned]' } : m))
    expect(firstAfter.slice(0, lastBefore.length)).toEqual(asPruned)
    for (const req of resumed) expect(JSON.stringify(req.body.messages).split('please also check README.md')).toHaveLength(2)
    // Counters go on from where they stopped.
    const b4 = before.state as { llm_call_count: number; turns: number; tool_call_count: number; total_tokens_used: number }
    expect(after.state).toMatchObject({ llm_call_count: b4.llm_call_count + resumed.length, turns: b4.turns + resumed.length })
    expect(after.state.tool_call_count).toBe(b4.tool_call_count + after.tools.length - before.tools.length)
    expect(Number(after.state.total_tokens_used)).toBeGreaterThanOrEqual(b4.total_tokens_used + 120 * resumed.length)
    expect(after.state.inbox_offset).toBe(readFileSync(join(after.dir, 'inbox.jsonl')).length)
    const rows = await settledJobs()
    expect(rows.map((j) => [j.kind, j.outcome])).toEqual([
      ['new', 'paused'],
      ['resume', 'completed'],
    ])
    expect((await query<{ claimed_by: string }>('SELECT claimed_by FROM fleet_jobs ORDER BY id')).map((r) => r.claimed_by.split(':')[0])).toEqual([
      'fleet-a',
      'fleet-b',
    ])
    process.kill(b.workerPid(), 'SIGTERM')
    expect((await exitOf(b.unshare)).code).toBe(0)
  })
})
