import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, expect, it, onTestFinished } from 'vitest'
import { exitOf } from '../helpers/wait.js'
import { agentPid, FAST_LOCKS, finish, until } from '../helpers/fleet-hosts.js'
import { enqueue, started, startWorker, stopCleanly } from '../helpers/fleet-worker.js'
import { usePostgres } from '../helpers/use-postgres.js'
import { fleetJobs } from '../helpers/fleet-jobs.js'
import { agentRequests, expectContinuousSeq, readTask, runSetup } from '../run/harness.js'
import type { RunSetup } from '../run/harness.js'

/**
 * docs/contract.md §14.4: a task paused by the LLM side is retried by the fleet with backoff, its job
 * `retrying` meanwhile and `failed` after fleet.retry.max_attempts; a pause the LLM side
 * cannot undo by itself stays. docs/contract.md §14.5: a watch-locks pass killed at any step leaves a
 * state the next pass completes.
 */
const database = usePostgres({ truncate: ['fleet_jobs', 'fleet_workers', 'tasks'] })
const db = database.env

const jobs = () => fleetJobs(database)

/** fleet.retry with a small base: a test waits on the jobs' states, never on these times. */
const RETRY = (maxAttempts: number) => `${FAST_LOCKS}  retry:\n    base_seconds: 0.1\n    max_seconds: 0.5\n    max_attempts: ${maxAttempts}\n`

/**
 * An LLM that answers `status` while `down()` says so (counting those answers), and finishes every task otherwise.
 * Each refusal asks for a 1 ms wait (`retry-after-ms`), which the client honours as any server's
 * (docs/running.md#rate-limits): its retries still run, without the seconds of its own backoff that
 * every failed run would otherwise idle through; the fleet's retry is what these tests are about.
 */
function outage(s: RunSetup, status: number, down: () => boolean): { failed: () => number } {
  let failed = 0
  s.fake.fallback = () => {
    if (!down()) return finish
    failed++
    return { status, content: `the server is ${status === 503 ? 'overloaded' : 'refusing'}`, headers: { 'retry-after-ms': '1' } }
  }
  return { failed: () => failed }
}

describe('an LLM outage', () => {
  it('503s for a while: every task in flight and every job claimed meanwhile is retried with backoff, and all complete with no action', {
    timeout: 240_000,
  }, async () => {
    const s = await runSetup(RETRY(50))
    let down = true
    const llm = outage(s, 503, () => down)
    const worker = await started(startWorker(s, database.server.url, ['--concurrency', '2']))
    const uuids: string[] = []
    for (const task of ['one', 'two', 'three']) uuids.push(await enqueue(s, database, ['--task', task, '--workspace', s.ws]))
    // The outage lasts until every job has failed at least once and waits for its next run.
    const during = await until('every job retrying after a failed run', async () => {
      const rows = await jobs()
      return rows.length === 3 && rows.every((j) => j.attempts >= 1 && j.error !== null) && rows.some((j) => j.state === 'retrying') ? rows : null
    })
    for (const job of during) expect(job.error).toMatch(/answered 503/)
    const listed = await s.run(['jobs', '--state', 'retrying', '--json'], db())
    expect(listed.code, listed.stderr).toBe(0)
    expect(
      listed.stdout
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l) as { state: string; next_run_at: string | null })
        .every((j) => j.state === 'retrying' && j.next_run_at !== null),
    ).toBe(true)
    expect(llm.failed()).toBeGreaterThanOrEqual(3)
    down = false
    const rows = await until('every job done', async () => {
      const all = await jobs()
      return all.length === 3 && all.every((j) => j.state === 'done') ? all : null
    })
    // One job per task, run again until it completed: no resume job, nothing lost.
    expect(rows.map((j) => [j.state, j.outcome, j.error])).toEqual([
      ['done', 'completed', null],
      ['done', 'completed', null],
      ['done', 'completed', null],
    ])
    for (const job of rows) expect(job.attempts).toBeGreaterThanOrEqual(2)
    for (const uuid of uuids) {
      const task = readTask(s.tree, uuid)
      expect(task.location).toBe('completed')
      expectContinuousSeq(task.messages)
    }
    // The agent's log, in a fleet, gives no advice to resume by hand.
    expect(worker.err()).toMatch(/the fleet runs it again later/)
    expect(worker.err()).not.toMatch(/resume with: ctxagent run --resume/)
    await stopCleanly(worker)
  })

  it('outlasting fleet.retry.max_attempts: the job fails with its last error and the task stays paused; jobs retry runs it again', {
    timeout: 240_000,
  }, async () => {
    const s = await runSetup(RETRY(2))
    let down = true
    outage(s, 503, () => down)
    const worker = await started(startWorker(s, database.server.url))
    const uuid = await enqueue(s, database, ['--task', 'one', '--workspace', s.ws])
    const [failed] = await until('the job failed', async () => {
      const rows = await jobs()
      return rows[0]?.state === 'failed' ? rows : null
    })
    expect(failed).toMatchObject({ task_uuid: uuid, state: 'failed', outcome: 'paused', attempts: 2 })
    expect(failed?.error).toMatch(/answered 503 .*\(attempt 2 of fleet\.retry\.max_attempts 2\)$/)
    expect(readTask(s.tree, uuid)).toMatchObject({ location: 'paused', state: { paused_by: 'llm', llm_failure: 'server_error' } })
    const shown = await s.run(['jobs', 'show', String(failed?.id), '--json'], db())
    expect(JSON.parse(shown.stdout)).toMatchObject({ id: failed?.id, state: 'failed', error: failed?.error, task_uuid: uuid })
    down = false
    const again = await s.run(['jobs', 'retry', String(failed?.id)], db())
    expect(again.code, again.stderr).toBe(0)
    const [done] = await until('the job done', async () => {
      const rows = await jobs()
      return rows[0]?.state === 'done' ? rows : null
    })
    expect(done).toMatchObject({ kind: 'resume', outcome: 'completed', error: null, attempts: 1 })
    expect(readTask(s.tree, uuid).location).toBe('completed')
    await stopCleanly(worker)
  })

  it('a refused API key (401) is not an outage: the task stays paused, its job done with the error, and not retried', { timeout: 180_000 }, async () => {
    const s = await runSetup(RETRY(5))
    outage(s, 401, () => true)
    const worker = await started(startWorker(s, database.server.url))
    const uuid = await enqueue(s, database, ['--task', 'one', '--workspace', s.ws])
    const [job] = await until('the job done', async () => {
      const rows = await jobs()
      return rows[0]?.state === 'done' ? rows : null
    })
    expect(job).toMatchObject({ outcome: 'paused', attempts: 1 })
    expect(job?.error).toMatch(/refused the API key \(401\)/)
    expect(readTask(s.tree, uuid)).toMatchObject({ location: 'paused', state: { paused_by: 'llm', llm_failure: null } })
    expect(await jobs()).toHaveLength(1)
    await stopCleanly(worker)
  })
})

/**
 * A `watch-locks --once` SIGKILLed at `step` (CTXAGENT_TEST_PAUSE_AT) once `reached()`
 * says the pass got there with work done: passes are started until one does (the dead
 * agent's lock counts as stale only once its heartbeat is old enough).
 */
async function passKilledAt(s: RunSetup, step: string, reached: () => boolean): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'ctxagent-pause-'))
  onTestFinished(() => rmSync(dir, { recursive: true, force: true }))
  const marker = join(dir, 'at')
  await until(
    `a pass stopped at ${step}`,
    async () => {
      rmSync(marker, { force: true })
      const saved = { ...process.env }
      Object.assign(process.env, { CTXAGENT_DATABASE_URL: database.server.url, CTXAGENT_TEST_PAUSE_AT: step, CTXAGENT_TEST_PAUSE_MARKER: marker })
      let pass
      try {
        pass = s.start(['watch-locks', '--once'])
      } finally {
        for (const key of ['CTXAGENT_DATABASE_URL', 'CTXAGENT_TEST_PAUSE_AT', 'CTXAGENT_TEST_PAUSE_MARKER']) {
          if (saved[key] === undefined) delete process.env[key]
          else process.env[key] = saved[key]
        }
      }
      const child = pass.child
      await until(
        'the pass at the step, or its end',
        async () => child.exitCode !== null || (existsSync(marker) && readFileSync(marker, 'utf8').trim() === String(child.pid)),
      )
      const there = child.exitCode === null
      child.kill('SIGKILL')
      await exitOf(child)
      return there && reached()
    },
    200,
  )
}

describe('a watch-locks pass killed at each step of a recovery', () => {
  for (const step of ['reap:before-move', 'reap:after-move']) {
    it(`killed at ${step}: the next pass moves the task and settles its job, whose resume runs`, { timeout: 240_000 }, async () => {
      const s = await runSetup(FAST_LOCKS)
      let go = false
      let n = 0
      s.fake.fallback = () => (go ? finish : { calls: [{ name: 'glob', arguments: { pattern: `*${n++}*` } }] })
      const worker = await started(startWorker(s, database.server.url))
      const uuid = await enqueue(s, database, ['--task', 'look around', '--workspace', s.ws, '--max-turns', '1000000'])
      await until('the task under way', async () => agentRequests(s.fake).length >= 2)
      const agent = await until('its agent', async () => agentPid(s, uuid))
      process.kill(agent, 'SIGKILL')
      await until('the worker saw its agent die', async () => worker.err().includes('watch-locks recovers it'))
      // The lock is stale once its heartbeat is old (a second): passes are tried until one gets that far and is killed there.
      await passKilledAt(s, step, () => (step === 'reap:after-move' ? readTask(s.tree, uuid).location === 'paused' : true))
      expect((await jobs()).map((j) => j.state)).toEqual(['running'])
      expect(readTask(s.tree, uuid).location).toBe(step === 'reap:after-move' ? 'paused' : 'running')
      go = true
      // Passes until one has settled the job and queued its resume (no more once it has: each is a
      // whole process, and the resume runs on the worker meanwhile); then the resume's end.
      await until('a pass that settled the job', async () => {
        const pass = await s.run(['watch-locks', '--once', '--json'], db())
        expect(pass.code, pass.stderr).toBe(0)
        return (await jobs()).length === 2
      })
      const rows = await until('the job settled and its resume done', async () => {
        const all = await jobs()
        return all.length === 2 && all.every((j) => j.state === 'done') ? all : null
      })
      expect(rows.map((j) => [j.kind, j.state, j.outcome])).toEqual([
        ['new', 'done', 'died'],
        ['resume', 'done', 'completed'],
      ])
      const task = readTask(s.tree, uuid)
      expect(task.location).toBe('completed')
      expectContinuousSeq(task.messages)
      await stopCleanly(worker)
    })
  }

  it('watch-locks --json counts the jobs a pass recovered', { timeout: 180_000 }, async () => {
    const s = await runSetup(FAST_LOCKS)
    let n = 0
    s.fake.fallback = () => ({ calls: [{ name: 'glob', arguments: { pattern: `*${n++}*` } }] })
    const worker = await started(startWorker(s, database.server.url))
    const uuid = await enqueue(s, database, ['--task', 'look around', '--workspace', s.ws, '--max-turns', '1000000'])
    await until('the task under way', async () => agentRequests(s.fake).length >= 2)
    process.kill(await until('its agent', async () => agentPid(s, uuid)), 'SIGKILL')
    await until('the worker saw its agent die', async () => worker.err().includes('watch-locks recovers it'))
    const summary = await until('a pass that recovered it', async () => {
      const pass = await s.run(['watch-locks', '--once', '--json'], db())
      const lines = pass.stdout
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l) as { pass?: { recovered: number; jobs_recovered?: number } })
      const last = lines.at(-1)?.pass
      return last !== undefined && last.recovered === 1 ? last : null
    })
    expect(summary.jobs_recovered).toBe(1)
    // Stopped cleanly: the resume the pass queued may be running by now, and must not write into a tree being removed.
    await stopCleanly(worker)
  })
})
