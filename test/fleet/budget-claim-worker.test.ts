import { writeFileSync } from 'node:fs'
import { describe, expect, it } from 'vitest'
import { FAST_LOCKS, finish, until } from '../helpers/fleet-hosts.js'
import { startWorker, stopCleanly } from '../helpers/fleet-worker.js'
import { usePostgres } from '../helpers/use-postgres.js'
import { readTask, runSetup } from '../run/harness.js'
import type { RunSetup } from '../run/harness.js'
import type { RecordedRequest } from '../helpers/fake-llm.js'

/**
 * docs/fleet-operations.md#waits, through a real worker: its claim knows, from the config
 * it was started with and the index's user_spend, that a user's daily cap is spent, and
 * does not start that user's job: it waits for the reset, holding no slot and spending no
 * attempt, while another user's job runs. The budgets' clock is the worker's (CTXAGENT_NOW,
 * pinned by the test); the queue's is the database's (the test moves the row's time).
 */
const database = usePostgres({ schema: true, truncate: ['fleet_jobs', 'fleet_workers', 'tasks', 'fleet_job_attempts', 'user_spend'] })
const db = database.env

interface JobRow {
  id: number
  user: string
  state: string
  attempts: number
  wait_reason: string | null
  wait_cap: string | null
  next_run_at: Date | null
  task_uuid: string
}
const jobs = () => database.query<JobRow>(`SELECT id::int, "user", state, attempts, wait_reason, wait_cap, next_run_at, task_uuid FROM fleet_jobs ORDER BY id`)

/** A worker whose clock says `now`. */
function workerAt(s: RunSetup, now: string) {
  process.env.CTXAGENT_NOW = now
  try {
    return startWorker(s, database.server.url, ['--concurrency', '1'])
  } finally {
    delete process.env.CTXAGENT_NOW
  }
}

const about = (word: string) => (r: RecordedRequest) => JSON.stringify(r.body.messages).includes(word)

describe("a worker's claim and a spent daily cap", () => {
  it("alice's cap spent: her job waits for the reset unstarted, bob's runs; after the reset hers runs", { timeout: 240_000 }, async () => {
    const s = await runSetup()
    // A first request may cost 100 tokens at $1,000 per million: $0.10. A $1 cap is spent from $0.90 on.
    writeFileSync(
      s.config,
      `${s.fake.configYaml(`${FAST_LOCKS}budgets:\n  user_daily_usd: 1\n`).replace('llm:\n', 'llm:\n  max_output_tokens: 100\n')}pricing:\n  fake-model:\n    prompt: 0\n    completion: 1000\n`,
    )
    s.fake.fallback = () => finish
    await database.query(`INSERT INTO user_spend ("user", day, usd, requests) VALUES ('alice', '2030-01-15', 0.95, 3)`)
    const enqueue = async (task: string, user: string) => {
      const res = await s.run(['enqueue', '--task', task, '--user', user, '--workspace', s.ws], db())
      expect(res.code, res.stderr).toBe(0)
      return res.stdout.trim()
    }
    const alice = await enqueue('alpha of alice', 'alice')
    const bob = await enqueue('beta of bob', 'bob')
    let worker = workerAt(s, '2030-01-15T10:00:00Z')
    const rows = await until("bob's job done, alice's waiting", async () => {
      const all = await jobs()
      return all[0]?.wait_reason === 'budget' && all[1]?.state === 'done' ? all : null
    })
    expect(rows[0]).toMatchObject({ user: 'alice', state: 'retrying', wait_cap: 'user-daily', attempts: 0 })
    expect(rows[0]?.next_run_at?.toISOString()).toBe('2030-01-16T00:00:00.000Z')
    expect(readTask(s.tree, bob).location).toBe('completed')
    // Alice's task was never started: no request, no directory.
    expect(s.fake.requests.filter(about('alpha of alice'))).toHaveLength(0)
    expect(() => readTask(s.tree, alice)).toThrow()
    const listed = await s.run(['jobs'], db())
    expect(listed.stdout).toMatch(/waiting for budget user-daily until 2030-01-16T00:00:00\.000Z/)
    const shown = JSON.parse((await s.run(['jobs', 'show', String(rows[0]?.id), '--json'], db())).stdout) as Record<string, unknown>
    expect(shown).toMatchObject({ state: 'retrying', waiting_for: 'budget', wait_cap: 'user-daily', attempts: 0, history: [] })
    await stopCleanly(worker)
    // The reset: the worker's clock says the 16th, and the row's time comes by the database's.
    worker = workerAt(s, '2030-01-16T00:00:01Z')
    await database.query('UPDATE fleet_jobs SET next_run_at = now() WHERE id = $1', [rows[0]?.id])
    await until("alice's job done", async () => (await jobs())[0]?.state === 'done')
    expect((await jobs())[0]).toMatchObject({ attempts: 1 })
    expect(readTask(s.tree, alice).location).toBe('completed')
    await stopCleanly(worker)
  })
})
