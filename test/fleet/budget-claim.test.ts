import { describe, expect, it, onTestFinished } from 'vitest'
import { parseConfig } from '../../src/config/load.js'
import { claimBudget } from '../../src/fleet/queue/claim-budget.js'
import { showJob } from '../../src/fleet/queue/job-admin.js'
import { firstPromptTokens, refuseSpentBudget } from '../../src/run/budget-start.js'
import { PgStore } from '../../src/storage/index/pg-store.js'
import type { TaskState } from '../../src/storage/task/state.js'
import { uuidN } from '../fixtures/tree.js'
import { enqueueNth, queueOn, spend } from '../helpers/fleet-jobs.js'
import { usePostgres } from '../helpers/use-postgres.js'

/**
 * The claim reads the spend (docs/fleet-operations.md#waits): a job whose user's daily or
 * monthly cap, or the fleet's daily cap, user_spend says is spent is not handed out; it
 * waits for the reset, holding no slot and spending no attempt. On real PostgreSQL; the
 * budgets' clock is the test's (the time given to the worker's figures), the queue's the
 * database's (a wait ends when the test moves the row's next_run_at).
 */
const database = usePostgres({ schema: true, truncate: ['fleet_jobs', 'fleet_job_attempts', 'user_spend', 'tasks'] })
const WORKER = 'host-a:1234:test'

// A first request may cost 1,000 tokens at $15 per million: $0.015. So a $1 cap is spent from $0.985 on.
const CONFIG = parseConfig(
  [
    'llm:\n  provider: openai\n  max_output_tokens: 1000\n  openai:\n    model: m',
    'budgets:\n  user_daily_usd: 1\n  fleet_daily_usd: 10',
    'users:\n  dave:\n    budgets:\n      user_daily_usd: null\n      user_monthly_usd: 2\n  erin:\n    llm:\n      model: free',
    'pricing:\n  m:\n    prompt: 3\n    completion: 15',
  ].join('\n'),
  'config.yaml',
)
const figures = claimBudget(CONFIG, 'ctxagent')
// Far from the database's own clock: the reset it is told is always ahead of it.
const NOW = new Date('2030-01-15T10:00:00Z')
const TOMORROW = '2030-01-16T00:00:00.000Z'

describe('the claim and a spent cost cap', () => {
  it('the thresholds: each cap less a first request at the user’s model’s price; a model without a price has none', () => {
    const at = figures?.(NOW)
    expect(at).toMatchObject({ day: '2030-01-15', from: '2030-01-01', to: '2030-01-31', daily_until: TOMORROW, monthly_until: '2030-02-01T00:00:00.000Z' })
    expect(at?.all).toEqual({ daily: 0.985, monthly: null, fleet: 9.985, prompt: 0.000003 })
    expect(at?.users.dave).toEqual({ daily: null, monthly: 1.985, fleet: 9.985, prompt: 0.000003 })
    expect(at?.users.erin).toEqual({ daily: null, monthly: null, fleet: null, prompt: null })
    expect(claimBudget(parseConfig('pricing:\n  m:\n    prompt: 3\n    completion: 15\n', 'config.yaml'), 'ctxagent')).toBeNull()
    // Caps, but no price for any model in use.
    expect(claimBudget(parseConfig('budgets:\n  user_daily_usd: 1\n', 'config.yaml'), 'ctxagent')).toBeNull()
  })

  it("user A's daily cap spent: A's job waits for the reset (budget, no attempt spent, no slot), B's is claimed; after the reset A's is", async () => {
    const queue = queueOn(database)
    await spend(database, 'alice', '2030-01-15', 0.99)
    await spend(database, 'bob', '2030-01-15', 0.5)
    // Alice's job first in the queue's order.
    const a = await enqueueNth(queue, 1, 'alice', 5)
    const b = await enqueueNth(queue, 2, 'bob')
    const budget = figures?.(NOW) ?? null
    expect(await queue.claim(WORKER, null, null, budget)).toMatchObject({ id: b, user: 'bob' })
    const waiting = await showJob(queue.pool, a)
    expect(waiting).toMatchObject({ state: 'retrying', waiting_for: 'budget', wait_cap: 'user-daily', next_run_at: TOMORROW, attempts: 0 })
    expect(waiting.history).toEqual([])
    // Not before the reset, by either clock.
    expect(await queue.claim(WORKER, null, null, budget)).toBeNull()
    // Due by the database's clock but still the same day by the budgets': passed over again, and told the reset again.
    await database.query('UPDATE fleet_jobs SET next_run_at = now() WHERE id = $1', [a])
    expect(await queue.claim(WORKER, null, null, budget)).toBeNull()
    expect((await showJob(queue.pool, a)).next_run_at).toBe(TOMORROW)
    // The day ends: the row's time comes, and the budgets' clock says the 16th (no spend yet).
    await database.query('UPDATE fleet_jobs SET next_run_at = now() WHERE id = $1', [a])
    const after = figures?.(new Date('2030-01-16T00:00:01Z')) ?? null
    expect(await queue.claim(WORKER, null, null, after)).toMatchObject({ id: a, user: 'alice', attempts: 1, kind: 'new' })
  })

  it("a resume whose window the cap cannot cover is held by the claim with its reason, as run's check at start refuses it; the user's other jobs wait for the same window", async () => {
    const queue = queueOn(database)
    await spend(database, 'alice', '2030-01-15', 0.5)
    // Two of alice's paused tasks: windows of 200,000 tokens ($0.60 at $3 per million) and of 10,000 ($0.03).
    const paused = async (n: number, window: number) =>
      database.query(
        `INSERT INTO tasks (uuid, status, location, task_type, created_at, "user", final_token_count)
         VALUES ($1, 'paused', 'paused', 'task', '2030-01-15T09:00:00.000Z', 'alice', $2)`,
        [uuidN(n), window],
      )
    await paused(7, 200_000)
    await paused(8, 10_000)
    const big = (await queue.enqueue({ task_uuid: uuidN(7), kind: 'resume', spec: {}, user: 'alice', priority: 5 })) as number
    const small = (await queue.enqueue({ task_uuid: uuidN(8), kind: 'resume', spec: {}, user: 'alice' })) as number
    const budget = figures?.(NOW) ?? null
    // $0.50 spent + $0.60 of window + $0.015 of output passes $1: held, with its reason, no attempt spent. A held user's
    // due jobs wait for that window together (docs/fleet-operations.md#waits): the small one too, saying so.
    expect(await queue.claim(WORKER, null, null, budget)).toBeNull()
    for (const id of [big, small])
      expect(await showJob(queue.pool, id)).toMatchObject({
        state: 'retrying',
        waiting_for: 'budget',
        wait_cap: 'user-daily',
        next_run_at: TOMORROW,
        attempts: 0,
      })
    // run's check at start, on the same spend, says the same of each (one estimate: run/budget-start.ts).
    const store = await PgStore.open(database.server.url, () => undefined)
    onTestFinished(() => store.close())
    const starting = (window: number, n: number) => {
      const state = { current_context_tokens: window } as TaskState
      return { user: 'alice', model: 'm', state, uuid: uuidN(n), maxCostUsd: null, promptTokens: firstPromptTokens({ state }) }
    }
    await expect(refuseSpentBudget(store, CONFIG, starting(200_000, 7), NOW)).rejects.toThrow(/user-daily cost cap .* is spent/)
    await expect(refuseSpentBudget(store, CONFIG, starting(10_000, 8), NOW)).resolves.toBeUndefined()
  })

  it('a monthly cap (users.<name>.budgets) waits for the month; the fleet-daily cap holds everyone with a price; per_user claims alike', async () => {
    const queue = queueOn(database)
    await spend(database, 'dave', '2030-01-02', 1.5)
    await spend(database, 'dave', '2030-01-15', 0.49)
    const d = await enqueueNth(queue, 3, 'dave')
    const c = await enqueueNth(queue, 4, 'carol')
    const budget = figures?.(NOW) ?? null
    expect(await queue.claim(WORKER, 2, null, budget)).toMatchObject({ id: c })
    expect(await showJob(queue.pool, d)).toMatchObject({ waiting_for: 'budget', wait_cap: 'user-monthly', next_run_at: '2030-02-01T00:00:00.000Z' })
    // Everyone's spend today reaches the fleet's cap less a request: $0.49 + $9.50.
    await spend(database, 'bob', '2030-01-15', 9.5)
    const f = await enqueueNth(queue, 5, 'frank')
    const e = await enqueueNth(queue, 6, 'erin')
    // Erin's model has no price: not capped by money.
    expect(await queue.claim(WORKER, 2, null, budget)).toMatchObject({ id: e })
    expect(await showJob(queue.pool, f)).toMatchObject({ waiting_for: 'budget', wait_cap: 'fleet-daily', next_run_at: TOMORROW, attempts: 0 })
    // Without the figures (no cap configured) the claim reads no spend.
    await database.query('UPDATE fleet_jobs SET next_run_at = now() WHERE id = $1', [f])
    expect(await queue.claim(WORKER, null, null, null)).toMatchObject({ id: f })
  })
})
