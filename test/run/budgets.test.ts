import { writeFileSync } from 'node:fs'
import { describe, expect, it } from 'vitest'
import { cliAsync } from '../helpers/run.js'
import { snapshotTree } from '../helpers/tree-snapshot.js'
import type { RecordedRequest } from '../helpers/fake-llm.js'
import { agentRequests, onlyTask, readTask, runSetup } from './harness.js'
import type { RunSetup } from './harness.js'

// Prices that make every figure exact: prompt tokens free, a completion token $0.001.
// Each request's estimate is then its max_tokens (llm.max_output_tokens: 100) × $0.001 = $0.10.
const NOW = '2026-11-28T10:00:00.000Z'

function priced(s: RunSetup, extra = ''): void {
  writeFileSync(
    s.config,
    `${s.fake.configYaml(extra).replace('llm:\n', 'llm:\n  max_output_tokens: 100\n')}pricing:\n  fake-model:\n    prompt: 0\n    completion: 1000\n`,
  )
}

/** The user message a request's task began with. */
const taskOf = (req: RecordedRequest): string => req.body.messages.find((m) => m.role === 'user')?.content ?? ''

describe('cost caps pause before the request that would pass them', () => {
  it('--max-cost: paused (exit 5, budget, cap task) before the request that would pass it, never after; resumed with a raised cap to completion', async () => {
    const s = await runSetup()
    priced(s)
    // Each reply costs $0.02 (20 completion tokens): after 3 the spend is $0.06, and a 4th request may cost $0.10, past $0.15.
    s.fake.fallback = (req) =>
      Array.isArray(req.body.tools)
        ? { calls: [{ name: 'glob', arguments: { pattern: `*${s.fake.requests.length}*` } }] }
        : { content: '## Original Task\nsummary' }
    const first = await s.run(['run', '--task', 'look around', '--workspace', s.ws, '--max-cost', '0.15', '--log-format', 'json', '--json'], {
      CTXAGENT_NOW: NOW,
    })
    expect(first.code, first.stderr).toBe(5)
    expect(s.fake.requests).toHaveLength(3)
    const paused = onlyTask(s.tree)
    expect(paused).toMatchObject({ location: 'paused', state: { status: 'paused', paused_by: 'budget', budget_cap: 'task', resume_at: null } })
    expect(JSON.parse(first.stdout)).toMatchObject({
      uuid: paused.uuid,
      status: 'paused',
      paused_by: 'budget',
      budget_cap: 'task',
      resume_at: null,
      exit_code: 5,
    })
    expect(paused.state.error).toMatch(/cost cap .*\$0\.15.*\$0\.06 spent, the next request may cost \$0\.10/)
    expect(paused.metadata.run).toMatchObject({ max_cost_usd: 0.15 })
    // The same cap again: refused before anything moves (exit 5), and no request.
    const again = await s.run(['run', '--resume', paused.uuid])
    expect(again.code).toBe(5)
    expect(again.stderr).toMatch(/cost cap .* is spent.*--max-cost/)
    expect(s.fake.requests).toHaveLength(3)
    expect(readTask(s.tree, paused.uuid).location).toBe('paused')
    // Raised: it goes on and completes.
    s.fake.queue.push({ content: 'all done' })
    const resumed = await s.run(['run', '--resume', paused.uuid, '--max-cost', '1'])
    expect(resumed.code, resumed.stderr).toBe(0)
    expect(readTask(s.tree, paused.uuid)).toMatchObject({ location: 'completed', state: { status: 'completed' } })
    expect(agentRequests(s.fake)).toHaveLength(4)
  })

  it("one user's daily cap shared by two concurrent tasks: each overshoots by at most its one request, both pause with the reset; another user is unaffected, and a new task of the first is refused", async () => {
    const s = await runSetup()
    priced(s, 'budgets:\n  user_daily_usd: 0.35\n')
    // Every reply costs what its estimate says ($0.10): a request in flight is the most a task can overshoot by.
    const usage = { prompt_tokens: 50, completion_tokens: 100, total_tokens: 150 }
    // Both tasks are under way before either is answered: on a busy machine the second could otherwise start
    // after the first had spent the cap, and be refused at its start instead of sharing it.
    let bothAsked = (): void => undefined
    const both = new Promise<void>((resolve) => (bothAsked = resolve))
    s.fake.fallback = (req) => {
      if (!Array.isArray(req.body.tools)) return { content: '## Original Task\nsummary', usage }
      if (taskOf(req).startsWith('bob')) return { content: 'bob is done', usage }
      const asking = new Set(s.fake.requests.map(taskOf).filter((t) => t.startsWith('alice one') || t.startsWith('alice two')))
      if (asking.size === 2) bothAsked()
      return { calls: [{ name: 'glob', arguments: { pattern: `*${s.fake.requests.length}*` } }], usage, delayMs: 30, after: both }
    }
    const args = (task: string, user: string) => ['run', '--task', task, '--user', user, '--workspace', s.ws, '--log-format', 'json']
    const env = { CTXAGENT_NOW: NOW }
    const [a, b] = await Promise.all([s.run([...args('alice one', 'alice'), '--json'], env), s.run(args('alice two', 'alice'), env)])
    expect([a.code, b.code], a.stderr + b.stderr).toEqual([5, 5])
    expect(JSON.parse(a.stdout)).toMatchObject({ status: 'paused', paused_by: 'budget', budget_cap: 'user-daily', resume_at: '2026-11-29T00:00:00.000Z' })
    const alice = s.fake.requests.filter((r) => taskOf(r).startsWith('alice'))
    // $0.35 allows 3 requests of $0.10 in all; each of the two may have had one more in flight.
    expect(alice.length).toBeGreaterThanOrEqual(3)
    expect(alice.length * 0.1).toBeLessThanOrEqual(0.35 + 2 * 0.1 + 1e-9)
    const tasks = s.tree.layout.list('paused').map((uuid) => readTask(s.tree, uuid))
    expect(tasks).toHaveLength(2)
    for (const t of tasks) expect(t.state).toMatchObject({ paused_by: 'budget', budget_cap: 'user-daily', resume_at: '2026-11-29T00:00:00.000Z' })
    // Bob has a budget of his own: his task runs to its end.
    const bob = await s.run(args('bob task', 'bob'), env)
    expect(bob.code, bob.stderr).toBe(0)
    // A new task of alice's today: refused in one line naming the cap and its reset, nothing created.
    const before = s.fake.requests.length
    const refused = await cliAsync([...args('alice three', 'alice'), '--home', s.tree.base, '--config', s.config], env)
    expect(refused.code).toBe(5)
    expect(refused.stderr).toMatch(
      /user-daily cost cap \(budgets\.user_daily_usd: \$0\.35\) is spent: alice's spend today is \$0\.\d\d[^;]*; it resets at 2026-11-29T00:00:00\.000Z/,
    )
    expect(s.fake.requests.length).toBe(before)
    expect(s.tree.layout.list('running')).toHaveLength(0)
    // The next day (the test's clock): the same user starts again.
    s.fake.fallback = () => ({ content: 'a new day', usage })
    const tomorrow = await s.run(args('alice four', 'alice'), { CTXAGENT_NOW: '2026-11-29T00:00:01.000Z' })
    expect(tomorrow.code, tomorrow.stderr).toBe(0)
  })

  it('users.<name>.budgets overrides the shared cap for that user (null: none)', async () => {
    const s = await runSetup()
    priced(s, 'budgets:\n  user_daily_usd: 0.01\nusers:\n  carol:\n    budgets:\n      user_daily_usd: null\n')
    s.fake.fallback = () => ({ content: 'done' })
    const carol = await s.run(['run', '--task', 't', '--user', 'carol', '--workspace', s.ws])
    expect(carol.code, carol.stderr).toBe(0)
    // Dave has the shared $0.01, which no request (max_tokens at the completion rate: $0.10) fits: refused, nothing created.
    const before = s.fake.requests.length
    const dave = await s.run(['run', '--task', 't', '--user', 'dave', '--workspace', s.ws])
    expect(dave.code).toBe(5)
    expect(dave.stderr).toMatch(
      /^ctxagent: the user-daily cost cap \(budgets\.user_daily_usd: \$0\.01\) is spent: dave's spend today is \$0\.00, and a request may cost \$0\.10; it resets at /,
    )
    expect(s.fake.requests.length).toBe(before)
    expect(s.tree.layout.list('paused')).toEqual([])
  })

  it('a new task whose first request the money left cannot cover is refused before anything is written: the tree and tasks.db as they were', async () => {
    const s = await runSetup()
    // Prompt tokens at $0.001 each, completions free: a request costs what its prompt holds.
    writeFileSync(
      s.config,
      `${s.fake.configYaml('budgets:\n  user_daily_usd: 0.5\n').replace('llm:\n', 'llm:\n  max_output_tokens: 100\n')}pricing:\n  fake-model:\n    prompt: 1000\n    completion: 0\n`,
    )
    s.fake.fallback = () => ({ content: 'done' })
    const small = await s.run(['run', '--task', 'say hi', '--workspace', s.ws], { CTXAGENT_NOW: NOW })
    expect(small.code, small.stderr).toBe(0)
    const requests = s.fake.requests.length
    const before = snapshotTree(s.tree.base)
    // A statement of some 1,500 tokens: its first request may cost about $1.50, past what is left of $0.50 today.
    const long = `Refactor the module. ${'Keep every public name as it is. '.repeat(200)}`
    const refused = await s.run(['run', '--task', long, '--workspace', s.ws], { CTXAGENT_NOW: NOW })
    expect(refused.code, refused.stderr).toBe(5)
    expect(refused.stderr).toMatch(
      /^ctxagent: the user-daily cost cap \(budgets\.user_daily_usd: \$0\.50\) is spent: \S+'s spend today is \$0\.\d\d, and a request may cost \$1\.\d\d; it resets at 2026-11-29T00:00:00\.000Z \(start it after the reset, or raise /,
    )
    expect(refused.stderr.trim().split('\n')).toHaveLength(1)
    // Its own cap the same: a --max-cost below its first request.
    const own = await s.run(['run', '--task', long, '--workspace', s.ws, '--max-cost', '0.4'], { CTXAGENT_NOW: NOW })
    expect(own.code, own.stderr).toBe(5)
    expect(own.stderr).toMatch(
      /^ctxagent: the task's cost cap \(run\.max_cost_usd \(--max-cost\): \$0\.40\) cannot cover its first request, which may cost \$1\.\d\d \(give it at least --max-cost 1\.\d\d\)$/m,
    )
    expect(s.fake.requests.length).toBe(requests)
    expect(snapshotTree(s.tree.base)).toEqual(before)
    expect(s.tree.layout.list('paused')).toEqual([])
  })

  it('a model without a price is not capped by money, and the start line says so', async () => {
    const s = await runSetup('run:\n  max_cost_usd: 0.0001\n')
    s.fake.fallback = () => ({ content: 'done' })
    const r = await s.run(['run', '--task', 't', '--workspace', s.ws, '--log-format', 'text'])
    expect(r.code, r.stderr).toBe(0)
    expect(r.stderr).toMatch(/model fake-model has no price in pricing: its requests are not capped by money/)
  })

  it('stats shows spend per user per day against the caps; stats --check warns at budgets.warn_at and is critical at a cap', async () => {
    const s = await runSetup()
    priced(s, 'budgets:\n  user_daily_usd: 0.25\nusers:\n  bob:\n    budgets:\n      user_daily_usd: 0.1\n')
    const usage = { prompt_tokens: 50, completion_tokens: 100, total_tokens: 150 }
    s.fake.fallback = (req) =>
      Array.isArray(req.body.tools)
        ? { calls: [{ name: 'glob', arguments: { pattern: `*${s.fake.requests.length}*` } }], usage }
        : { content: 'summary', usage }
    const env = { CTXAGENT_NOW: NOW }
    // alice: 2 requests of $0.10 under her $0.25 (80%); bob: 1 under his $0.10 (100%).
    expect((await s.run(['run', '--task', 'a', '--user', 'alice', '--workspace', s.ws], env)).code).toBe(5)
    expect((await s.run(['run', '--task', 'b', '--user', 'bob', '--workspace', s.ws], env)).code).toBe(5)
    const json = await s.run(['stats', '--json'], env)
    expect(json.code, json.stderr).toBe(0)
    const spend = (JSON.parse(json.stdout) as { spend: { days: unknown[]; caps: unknown[] } }).spend
    expect(spend.days).toEqual([
      { day: '2026-11-28', user: 'alice', usd: 0.2, requests: 2 },
      { day: '2026-11-28', user: 'bob', usd: 0.1, requests: 1 },
    ])
    expect(spend.caps).toEqual(
      expect.arrayContaining([
        { cap: 'user-daily', user: 'alice', spent: 0.2, limit: 0.25, share: 0.8, resets_at: '2026-11-29T00:00:00.000Z' },
        { cap: 'user-daily', user: 'bob', spent: 0.1, limit: 0.1, share: 1, resets_at: '2026-11-29T00:00:00.000Z' },
      ]),
    )
    const check = await s.run(['stats', '--check'], env)
    expect(check.code, check.stdout).toBe(2)
    expect(check.stdout).toMatch(/WARNING: user alice's daily spend \$0\.20 is 80% of its user-daily cap \$0\.25/)
    expect(check.stdout).toMatch(
      /CRITICAL: user bob's daily spend \$0\.10 is 100% of its user-daily cap \$0\.10: its tasks pause until 2026-11-29T00:00:00\.000Z/,
    )
    const text = await s.run(['stats'], env)
    expect(text.stdout).toMatch(/Spend \(days in UTC\)/)
    // The next day: yesterday's spend counts no more against the daily caps.
    expect((await s.run(['stats', '--check'], { CTXAGENT_NOW: '2026-11-29T08:00:00.000Z' })).code).toBe(0)
  })

  it('--max-cost that is not an amount above 0 is a usage error (exit 2), nothing created', async () => {
    const s = await runSetup()
    for (const bad of ['0', 'abc', '-1', '1e3', 'NaN', '9'.repeat(400)]) {
      const r = await s.run(['run', '--task', 't', '--workspace', s.ws, '--max-cost', bad])
      expect(r.code, bad).toBe(2)
      expect(r.stderr).toMatch(/--max-cost.*must be an amount in USD above 0/)
    }
    expect(s.fake.requests).toHaveLength(0)
    expect(s.tree.layout.list('running')).toEqual([])
  })
})
