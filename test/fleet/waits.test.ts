import { writeFileSync } from 'node:fs'
import { describe, expect, it } from 'vitest'
import { FAST_LOCKS, finish, until } from '../helpers/fleet-hosts.js'
import { enqueue, startWorker, stopCleanly } from '../helpers/fleet-worker.js'
import { usePostgres } from '../helpers/use-postgres.js'
import { fleetJobs } from '../helpers/fleet-jobs.js'
import { agentRequests, expectContinuousSeq, readTask, runSetup } from '../run/harness.js'
import type { RunSetup } from '../run/harness.js'
import type { RecordedRequest } from '../helpers/fake-llm.js'

/**
 * docs/fleet-operations.md#waits: a job whose task paused for a provider usage limit waits
 * until the limit lifts (the server's Retry-After), holding no slot and spending no
 * fleet.retry attempt; its history (jobs show) lists every attempt.
 *
 * The clock: the wait's end is the job's next_run_at in PostgreSQL, compared with the
 * database's now() by every claim. The test "moves the clock" by moving that row's time
 * to now() (the limit lifted early, as far as the fleet can tell); no test waits an hour,
 * and none waits on wall time.
 */
const database = usePostgres({ truncate: ['fleet_jobs', 'fleet_workers', 'tasks', 'fleet_job_attempts'] })
const query = database.query
const db = database.env

const jobs = () => fleetJobs(database)

/** The test's config: fleet.retry with `maxAttempts`, and a client that waits at most 50 ms for a Retry-After (a longer one is a usage limit). */
async function setup(maxAttempts: number): Promise<RunSetup> {
  const s = await runSetup(`${FAST_LOCKS}  retry:\n    base_seconds: 0.1\n    max_seconds: 0.5\n    max_attempts: ${maxAttempts}\n`)
  writeFileSync(
    s.config,
    s.fake
      .configYaml(`${FAST_LOCKS}  retry:\n    base_seconds: 0.1\n    max_seconds: 0.5\n    max_attempts: ${maxAttempts}\n`)
      .replace('llm:\n', 'llm:\n  max_retry_wait: 0.05\n'),
  )
  return s
}

const about = (word: string) => (r: RecordedRequest) => JSON.stringify(r.body.messages).includes(word)
const LIMITED = { status: 429, headers: { 'retry-after': '3600' }, content: 'usage limit reached for this key' }

interface ShownJob {
  state: string
  waiting_for: string | null
  next_run_at: string | null
  attempts: number
  waits: number
  history: {
    attempt: number
    reason: string
    outcome: string
    wait_until: string | null
    again: boolean
    error: string | null
    host: string | null
    started_at: string | null
  }[]
}
async function shown(s: RunSetup, id: number): Promise<ShownJob> {
  const res = await s.run(['jobs', 'show', String(id), '--json'], db())
  expect(res.code, res.stderr).toBe(0)
  return JSON.parse(res.stdout) as ShownJob
}

describe('a provider usage limit in the fleet', () => {
  it('429 with Retry-After: 3600: the job waits until then, sends nothing before, spends no attempt, its slot runs another job, and it completes when the limit lifts', {
    timeout: 240_000,
  }, async () => {
    // fleet.retry.max_attempts 1: an outage would fail the job at its first failure; a wait spends nothing.
    const s = await setup(1)
    let limited = true
    s.fake.fallback = (req) => (about('alpha')(req) && limited ? LIMITED : finish)
    const worker = startWorker(s, database.server.url, ['--concurrency', '1'])
    const alpha = await enqueue(s, database, ['--task', 'alpha', '--workspace', s.ws])
    const [waiting] = await until('the job waiting out the limit', async () => {
      const rows = await jobs()
      return rows[0]?.state === 'retrying' && rows[0].wait_reason === 'rate-limit' ? rows : null
    })
    // Until the server's reset (an hour from the pause, by the database's clock), not a backoff of seconds.
    expect(waiting?.until_s).toBeGreaterThan(3500)
    expect(waiting?.until_s).toBeLessThanOrEqual(3600)
    expect(waiting).toMatchObject({ attempts: 1, limit_waits: 1, outcome: 'paused' })
    expect(readTask(s.tree, alpha)).toMatchObject({ location: 'paused', state: { paused_by: 'rate-limit', llm_failure: 'rate_limited' } })
    const sent = s.fake.requests.filter(about('alpha')).length
    // `jobs` shows it waiting, with the time.
    const listed = await s.run(['jobs'], db())
    expect(listed.stdout).toMatch(/waiting for rate-limit until \d{4}-\d\d-\d\dT/)
    const job = await shown(s, waiting?.id as number)
    expect(job).toMatchObject({ state: 'retrying', waiting_for: 'rate-limit', attempts: 1, waits: 1 })
    expect(job.history).toHaveLength(1)
    expect(job.history[0]).toMatchObject({ attempt: 1, reason: 'rate-limit', outcome: 'paused', again: true })
    expect(job.history[0]?.wait_until).toBe(job.next_run_at)
    expect(job.history[0]?.error).toMatch(/answered 429|usage limit on this API key lifts at/)
    // The one slot goes to other work meanwhile: beta is claimed and runs at once. On the same API key, it learns of
    // the limit from the index (llm_key_limits) before sending anything, and waits too.
    const beta = await enqueue(s, database, ['--task', 'beta', '--workspace', s.ws])
    await until('the other job run, and waiting too', async () => (await jobs())[1]?.wait_reason === 'rate-limit')
    expect(readTask(s.tree, beta).location).toBe('paused')
    expect(s.fake.requests.filter(about('beta')).length).toBe(0)
    expect((await jobs())[0]).toMatchObject({ state: 'retrying', wait_reason: 'rate-limit' })
    expect(s.fake.requests.filter(about('alpha')).length).toBe(sent)
    // A planned wait is news in the worker's log, its reason and time: no warning, no error (docs/running.md#waits).
    expect(worker.err()).toMatch(/worker \S+: job \d+: paused; waits until \S+ \(rate-limit; no attempt spent/)
    expect(worker.err()).toMatch(/\[uuid:[0-9a-f]{8}\] task \S+ waits until \S+ \(rate-limit\): /)
    expect(worker.err()).not.toMatch(/(error|warning): job|error: task/)
    // The limit lifts: the server answers again, and the row's time comes (the test's clock).
    limited = false
    // Time passing lifts the key's own record too (llm_key_limits, which every task on the key reads before sending).
    await query('DELETE FROM llm_key_limits')
    await query(`UPDATE fleet_jobs SET next_run_at = now() WHERE task_uuid = ANY($1)`, [[alpha, beta]])
    const [done] = await until('both jobs done', async () => {
      const rows = await jobs()
      return rows[0]?.state === 'done' && rows[1]?.state === 'done' ? rows : null
    })
    expect(readTask(s.tree, beta).location).toBe('completed')
    expect(done).toMatchObject({ outcome: 'completed', attempts: 2, limit_waits: 1 })
    const task = readTask(s.tree, alpha)
    expect(task.location).toBe('completed')
    expectContinuousSeq(task.messages)
    const history = (await shown(s, done?.id as number)).history
    expect(history.map((a) => [a.attempt, a.reason, a.again])).toEqual([
      [1, 'rate-limit', true],
      [2, 'completed', false],
    ])
    expect(agentRequests(s.fake).length).toBeGreaterThan(0)
    await stopCleanly(worker)
  })

  it('jobs retry of a waiting job runs it now', { timeout: 240_000 }, async () => {
    const s = await setup(3)
    let limited = true
    s.fake.fallback = (_req) => (limited ? LIMITED : finish)
    const worker = startWorker(s, database.server.url)
    const uuid = await enqueue(s, database, ['--task', 'gamma', '--workspace', s.ws])
    const [waiting] = await until('the job waiting', async () => {
      const rows = await jobs()
      return rows[0]?.wait_reason === 'rate-limit' ? rows : null
    })
    limited = false
    // The limit has lifted early (the operator knows): the key's record goes, and retry runs the job now.
    await query('DELETE FROM llm_key_limits')
    const hurried = await s.run(['jobs', 'retry', String(waiting?.id)], db())
    expect(hurried.code, hurried.stderr).toBe(0)
    expect(hurried.stdout).toMatch(/runs now, not at its retry time/)
    await until('the job done', async () => (await jobs())[0]?.state === 'done')
    expect(readTask(s.tree, uuid).location).toBe('completed')
    await stopCleanly(worker)
  })

  it('a job’s history after an outage, then a usage limit: each attempt with its reason, the wait with its time, and the end', {
    timeout: 240_000,
  }, async () => {
    const s = await setup(3)
    let phase: 'outage' | 'limit' | 'up' = 'outage'
    s.fake.fallback = () => (phase === 'outage' ? { status: 503, content: 'overloaded' } : phase === 'limit' ? LIMITED : finish)
    const worker = startWorker(s, database.server.url)
    const uuid = await enqueue(s, database, ['--task', 'delta', '--workspace', s.ws])
    await until('a run failed by the outage', async () => {
      const rows = await query<{ n: string }>(`SELECT count(*) AS n FROM fleet_job_attempts WHERE reason = 'outage'`)
      return Number(rows[0]?.n) >= 1
    })
    phase = 'limit'
    const [waiting] = await until('the job waiting out the limit', async () => {
      const rows = await jobs()
      return rows[0]?.wait_reason === 'rate-limit' ? rows : null
    })
    phase = 'up'
    await query('DELETE FROM llm_key_limits')
    await query(`UPDATE fleet_jobs SET next_run_at = now() WHERE id = $1`, [waiting?.id])
    await until('the job done', async () => (await jobs())[0]?.state === 'done')
    const job = await shown(s, waiting?.id as number)
    const reasons = job.history.map((a) => a.reason)
    expect(reasons[reasons.length - 1]).toBe('completed')
    expect(reasons.slice(-2, -1)).toEqual(['rate-limit'])
    expect(reasons.slice(0, -2).every((r) => r === 'outage')).toBe(true)
    for (const a of job.history) expect(a.host).not.toBeNull()
    expect(job.history.find((a) => a.reason === 'outage')?.error).toMatch(/answered 503/)
    expect(job.history.find((a) => a.reason === 'rate-limit')?.wait_until).not.toBeNull()
    // The text form lists them too.
    const text = await s.run(['jobs', 'show', String(waiting?.id)], db())
    expect(text.stdout).toMatch(/history:/)
    expect(text.stdout).toMatch(/rate-limit/)
    expect(readTask(s.tree, uuid).location).toBe('completed')
    // A retried failure is a warning in the worker's log, never an error: the job did not fail.
    expect(worker.err()).toMatch(/warning: job \d+: paused; retrying in/)
    expect(worker.err()).not.toMatch(/error: job/)
    await stopCleanly(worker)
  })
})
