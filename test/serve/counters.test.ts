import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { makeTree, uuidN } from '../fixtures/tree.js'
import { cliAsync } from '../helpers/run.js'
import { startPostgres } from '../helpers/postgres.js'
import type { PgServer } from '../helpers/postgres.js'
import { startServe } from './helpers.js'
import { parseExposition, total } from './exposition.js'
import type { Family } from './exposition.js'

let server: PgServer
beforeAll(async () => {
  server = await startPostgres()
})
afterAll(async () => {
  await server?.stop()
})

/** Every sample of every counter (and the duration histogram's), by its name and labels. */
function counterSamples(m: Map<string, Family>): Map<string, number> {
  const out = new Map<string, number>()
  for (const f of m.values()) {
    if (f.type !== 'counter' && f.type !== 'histogram') continue
    for (const s of f.samples) out.set(`${s.name}${JSON.stringify(s.labels)}`, s.value)
  }
  return out
}

describe.each([
  ['tasks.db', () => ({})],
  ['PostgreSQL', () => ({ CTXAGENT_DATABASE_URL: server.url })],
] as const)('/metrics counters (%s)', (_name, envOf) => {
  it('never fall: not when cleanup deletes tasks, not when reindex rebuilds the index, not across restarts of serve', async () => {
    const env: Record<string, string> = envOf()
    const tree = makeTree()
    // Completed in 2024: past cleanup's 30 days, so it deletes them. The paused one stays.
    tree.write({
      uuid: uuidN(1),
      user: 'alice',
      completedAt: '2024-01-10T12:00:00.000Z',
      createdAt: '2024-01-10T10:00:00.000Z',
      // 2,000 of its prompt written to the provider's cache; 2 compactions' summary requests and a final summary besides its 7 turns.
      state: {
        prompt_tokens: 40_000,
        completion_tokens: 5_000,
        cached_tokens: 10_000,
        cache_write_tokens: 2_000,
        total_tokens_used: 45_000,
        llm_call_count: 7,
        compaction_tokens: { requests: 2, prompt_tokens: 900, completion_tokens: 90, cached_tokens: 0 },
        final_summary_tokens: { requests: 1, prompt_tokens: 500, completion_tokens: 50, cached_tokens: 0 },
        // Completed, its delivery refused (docs/delivery.md#what-is-recorded).
        delivery: { mode: 'pr', branch: null, commit: null, pushed: false, pr: null, refused: 'not delivered: .env matches deliver.exclude (.env*)' },
      },
    })
    tree.write({
      uuid: uuidN(2),
      user: 'bob',
      status: 'failed',
      createdAt: '2024-01-11T10:00:00.000Z',
      completedAt: '2024-01-11T10:05:00.000Z',
      state: { prompt_tokens: 2_000, completion_tokens: 300, cached_tokens: 0, total_tokens_used: 2_300, llm_call_count: 3 },
    })
    tree.write({
      uuid: uuidN(3),
      user: 'alice',
      location: 'paused',
      createdAt: '2024-01-12T10:00:00.000Z',
      state: { prompt_tokens: 1_000, completion_tokens: 100, cached_tokens: 0, total_tokens_used: 1_100, llm_call_count: 2 },
    })
    const run = async (args: string[]) => {
      const res = await cliAsync([...args, '--home', tree.base, '--config', 'none'], env)
      expect(res.code, res.stderr).toBe(0)
      return res
    }
    await run(['reindex'])
    const scrape = async () => {
      const s = await startServe(tree.base, { env })
      const res = await s.get('/metrics')
      expect(res.status).toBe(200)
      const m = parseExposition(await res.text())
      await new Promise<void>((resolve) => {
        s.child.once('exit', () => resolve())
        s.child.kill('SIGTERM')
      })
      return m
    }
    const before = await scrape()
    expect(total(before, 'ctxagent_tasks')).toBe(3)
    expect(total(before, 'ctxagent_tokens_total', { kind: 'input' })).toBe(31_000)
    expect(total(before, 'ctxagent_tokens_total', { kind: 'cache_write' })).toBe(2_000)
    expect(total(before, 'ctxagent_turns_total')).toBe(12)
    expect(total(before, 'ctxagent_llm_calls_total', { purpose: 'turn' })).toBe(12)
    expect(total(before, 'ctxagent_llm_calls_total', { purpose: 'summary' })).toBe(2)
    expect(total(before, 'ctxagent_llm_calls_total', { purpose: 'final-summary' })).toBe(1)
    expect(total(before, 'ctxagent_task_duration_seconds', {}, 'ctxagent_task_duration_seconds_count')).toBe(2)
    expect(total(before, 'ctxagent_deliveries_total', { result: 'refused' })).toBe(1)
    expect(total(before, 'ctxagent_deliveries_total')).toBe(1)

    await run(['cleanup'])
    const stats = JSON.parse((await run(['stats', '--json'])).stdout) as { total: number; tokens: { prompt: number } }
    expect(stats.total).toBe(1)
    const after = await scrape()
    expect(total(after, 'ctxagent_tasks')).toBe(1)
    // The live figures fell with the rows; the counters kept what the deleted tasks had.
    expect(stats.tokens.prompt).toBe(1_000)
    const was = counterSamples(before)
    const now = counterSamples(after)
    expect(was.size).toBeGreaterThan(10)
    for (const [key, value] of was) expect(now.get(key), key).toBeGreaterThanOrEqual(value)
    expect(total(after, 'ctxagent_tokens_total', { kind: 'input' })).toBe(31_000)
    expect(total(after, 'ctxagent_tokens_total', { kind: 'cache_write' })).toBe(2_000)
    expect(total(after, 'ctxagent_turns_total')).toBe(12)
    expect(total(after, 'ctxagent_llm_calls_total')).toBe(15)
    expect(total(after, 'ctxagent_deliveries_total', { result: 'refused' })).toBe(1)

    // reindex rebuilds the rows from the tree: the counters neither count the live tasks twice nor lose the deleted ones.
    await run(['reindex'])
    const rebuilt = counterSamples(await scrape())
    expect(Object.fromEntries(rebuilt)).toEqual(Object.fromEntries(now))
  })
})
