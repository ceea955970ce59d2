import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { SqliteStore } from '../../src/storage/index/store.js'
import { uuidN } from '../fixtures/tree.js'
import { taskRow } from '../fixtures/task-row.js'
import { startFakeAnthropic } from '../helpers/fake-anthropic.js'
import type { AnthropicReply } from '../helpers/fake-anthropic.js'
import type { Reply } from '../helpers/fake-llm.js'
import { cliAsync } from '../helpers/run.js'
import { usePostgres } from '../helpers/use-postgres.js'
import { readTask } from '../run/harness.js'
import type { RunSetup } from '../run/harness.js'
import { runSetup } from '../run/harness.js'
import { startServe } from '../serve/helpers.js'
import { record } from './report.js'

/*
 * Issue #36: usage figures were taken from the LLM server unchecked. A negative count
 * counted tokens down (--max-tokens never reached), a string was stored as a string,
 * 1e308 summed to Infinity (null in state.json), 1e20 is past PostgreSQL's bigint: the
 * index refused the row, reindex failed for the whole tree and /metrics answered 500.
 * Hostile servers of both providers, real runs with a budget, then every command that
 * walks the tasks.
 */

const db = usePostgres({ truncate: ['tasks', 'task_totals', 'task_counters', 'task_durations', 'task_tool_calls'] })

/** OpenAI-compatible usage reports no request can cost, one per turn, in turn. */
const OPENAI_USAGE: Reply['usage'][] = [
  { prompt_tokens: -1_000_000, completion_tokens: 5, total_tokens: -999_995 },
  { prompt_tokens: 300.5, completion_tokens: 5, total_tokens: 305.5 },
  { prompt_tokens: 1e308, completion_tokens: 1e308, total_tokens: 1e308 },
  { prompt_tokens: 1e20, completion_tokens: 5, total_tokens: 1e20 },
  { prompt_tokens: '300', completion_tokens: '5', total_tokens: '305' },
  { completion_tokens: 5 },
  { prompt_tokens: 300, completion_tokens: 5, total_tokens: -1e9, prompt_tokens_details: { cached_tokens: -4 } },
]

/** The Messages API's usage, likewise (the cache's reads and writes are part of the prompt). */
const ANTHROPIC_USAGE: NonNullable<AnthropicReply['usage']>[] = [
  { input_tokens: -1_000_000, output_tokens: 5 },
  { input_tokens: 300, output_tokens: 5.5 },
  { input_tokens: 300, output_tokens: 5, cache_read_input_tokens: 1e308 },
  { input_tokens: 300, output_tokens: 5, cache_creation_input_tokens: 1e20 },
  { input_tokens: '300', output_tokens: 5 },
  { output_tokens: 5 },
  { input_tokens: 300, output_tokens: 5, cache_read_input_tokens: -300 },
]

const isCount = (v: unknown) => typeof v === 'number' && Number.isSafeInteger(v) && v >= 0
const BUDGET = ['--max-tokens', '3000', '--max-turns', '20']

/** A task's counters, each a whole number of 0 or more, and within what a few small requests cost. */
function expectSound(s: RunSetup, uuid: string): number {
  const task = readTask(s.tree, uuid)
  for (const key of ['total_tokens_used', 'prompt_tokens', 'completion_tokens', 'llm_call_count', 'current_context_tokens']) {
    expect(isCount(task.state[key]), `${key}: ${String(task.state[key])}`).toBe(true)
  }
  expect(task.state.total_tokens_used as number).toBeGreaterThanOrEqual(3000)
  expect(task.state.total_tokens_used as number).toBeLessThan(100_000)
  for (const m of task.messages.filter((m) => m.usage !== undefined)) {
    for (const v of Object.values(m.usage as Record<string, unknown>)) expect(v === true || isCount(v), JSON.stringify(m.usage)).toBe(true)
  }
  return task.state.total_tokens_used as number
}

/** `run` against a server that answers every turn with another glob and the next hostile usage; the budget must still end it. */
async function hostileRun(s: RunSetup, provider: 'openai' | 'anthropic'): Promise<{ uuid: string; requests: number; stderr: string }> {
  let n = 0
  const call = () => [{ name: 'glob', arguments: { pattern: `*${n}*` } }]
  if (provider === 'openai') {
    const before = s.fake.requests.length
    s.fake.fallback = () => ({ calls: call(), usage: OPENAI_USAGE[n++ % OPENAI_USAGE.length] })
    const res = await s.run(['run', '--task', 'count carefully', '--workspace', s.ws, ...BUDGET], db.env())
    return { uuid: uuidOf(res.stderr, res), requests: s.fake.requests.length - before, stderr: res.stderr }
  }
  const fake = await startFakeAnthropic()
  fake.fallback = () => ({ calls: call(), usage: ANTHROPIC_USAGE[n++ % ANTHROPIC_USAGE.length] as AnthropicReply['usage'] })
  const config = join(s.tree.base, 'anthropic.yaml')
  writeFileSync(config, fake.configYaml())
  const res = await cliAsync(['run', '--task', 'count carefully', '--workspace', s.ws, ...BUDGET, '--home', s.tree.base, '--config', config], {
    ...db.env(),
    ANTHROPIC_API_KEY: '',
    ANTHROPIC_BASE_URL: '',
  })
  return { uuid: uuidOf(res.stderr, res), requests: fake.requests.filter((r) => Array.isArray(r.body.tools)).length, stderr: res.stderr }
}

function uuidOf(stderr: string, res: { code: number }): string {
  // The budget ends it: exit 5, never max_turns.
  expect(res.code, stderr).toBe(5)
  expect(stderr).toMatch(/max_tokens budget: [\d,]+ of 3,000 tokens used/)
  return /"uuid":"([0-9a-f-]{36})"/.exec(stderr)?.[1] as string
}

describe('usage figures from a hostile LLM server', () => {
  it('negative, fractional, huge, strings, missing, on both providers: counted by the estimate with one warning, the budget reached; reindex, stats --json, /metrics and the PostgreSQL index all answer', async () => {
    const s = await runSetup()
    const counted: Record<string, number> = {}
    for (const provider of ['openai', 'anthropic'] as const) {
      const run = await hostileRun(s, provider)
      // Every kind was sent at least once before the budget ended the run.
      expect(run.requests).toBeGreaterThanOrEqual(OPENAI_USAGE.length)
      expect(run.requests).toBeLessThan(20)
      expect(run.stderr.match(/usage report is not believed/g)).toHaveLength(1)
      counted[provider] = expectSound(s, run.uuid)
      // The owner's own index writes went to PostgreSQL: the row holds what state.json holds.
      const [row] = await db.query<{ total_tokens: string }>('SELECT total_tokens FROM tasks WHERE uuid = $1', [run.uuid])
      expect(Number(row?.total_tokens)).toBe(counted[provider])
    }

    // A task an older version wrote after believing such a server: null (1e308 summed), a string, 1e20, negatives.
    const old = uuidN(77)
    s.tree.write({
      uuid: old,
      state: { total_tokens_used: null, prompt_tokens: 'many', completion_tokens: -5, cached_tokens: 1e20, llm_call_count: 1e308, current_context_tokens: 2.5 },
    })

    for (const env of [{}, db.env()]) {
      const reindexed = await cliAsync(['reindex', '--json', '--home', s.tree.base, '--config', 'none'], env)
      expect(reindexed.code, reindexed.stderr).toBe(0)
      const result = JSON.parse(reindexed.stdout) as { indexed: number; repaired: { uuid: string; counters: string[] }[] }
      expect(result.indexed).toBe(3)
      expect(result.repaired.map((r) => r.uuid)).toEqual([old])
      expect(reindexed.stderr).toContain(`${old}: state.json has counters that are not whole numbers, indexed as`)

      const stats = await cliAsync(['stats', '--json', '--home', s.tree.base, '--config', 'none'], env)
      expect(stats.code, stats.stderr).toBe(0)
      const report = JSON.parse(stats.stdout) as { total: number; by_user: { tokens: number }[] }
      expect(report.total).toBe(3)
      expect(report.by_user.reduce((sum, u) => sum + u.tokens, 0)).toBe(counted.openai! + counted.anthropic! + 0)

      const serve = await startServe(s.tree.base, { env })
      const metrics = await serve.get('/metrics')
      expect(metrics.status).toBe(200)
      const text = await metrics.text()
      for (const line of text.split('\n').filter((l) => l.startsWith('ctxagent_tokens_total{'))) expect(isCount(Number(line.split(' ').pop()))).toBe(true)
      expect((await serve.get('/api/stats')).status).toBe(200)
    }
    const [old_row] = await db.query<{ total_tokens: string; llm_call_count: string; cached_tokens: string }>(
      'SELECT total_tokens, llm_call_count, cached_tokens FROM tasks WHERE uuid = $1',
      [old],
    )
    expect(old_row).toEqual({ total_tokens: '0', llm_call_count: '0', cached_tokens: '0' })
    record('hostile-usage', { providers: 2, kinds: OPENAI_USAGE.length + ANTHROPIC_USAGE.length, tokens: counted })
  }, 180_000)

  it('an index an older version filled with a negative and a huge count: /metrics still answers, says so, and counts them as 0', async () => {
    const s = await runSetup()
    s.tree.write({ uuid: uuidN(1) })
    const store = SqliteStore.open(s.tree.layout.db)
    store.upsert(taskRow(uuidN(1), { prompt_tokens: -500, completion_tokens: 1e20, total_tokens: 2.5 }))
    store.upsert(taskRow(uuidN(2), { user: 'bob' }))
    await store.close()
    const serve = await startServe(s.tree.base)
    const metrics = await serve.get('/metrics')
    expect(metrics.status).toBe(200)
    const text = await metrics.text()
    expect(text).toContain('ctxagent_tokens_total{user="bob",model="",kind="input"} 8')
    expect(text).toContain('ctxagent_tokens_total{user="alice",model="",kind="input"} 0')
    expect(serve.err()).toContain('counter(s) in the index are not whole numbers of 0 or more')
  })
})
