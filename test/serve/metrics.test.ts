import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { makeTree, uuidN } from '../fixtures/tree.js'
import type { FixtureTask } from '../fixtures/tree.js'
import { cliIn } from '../helpers/in-process.js'
import { configWith, reindex, startServe } from './helpers.js'
import { parseExposition, total } from './exposition.js'

describe('serve: /metrics', () => {
  it("is valid exposition whose figures are the index's, as stats --json reports them, and survive a restart", async () => {
    const tree = makeTree()
    const requests = (n: number) => ({ requests: n, prompt_tokens: 100 * n, completion_tokens: 10 * n, cached_tokens: 0 })
    const tasks: FixtureTask[] = [
      {
        uuid: uuidN(1),
        user: 'alice',
        createdAt: '2024-01-10T10:00:00.000Z',
        // 4,000 of its prompt written to the provider's cache; 3 compactions' summaries and a final summary besides its turns.
        state: {
          prompt_tokens: 40_000,
          completion_tokens: 5_678,
          cached_tokens: 10_000,
          cache_write_tokens: 4_000,
          compaction_tokens: requests(3),
          final_summary_tokens: requests(1),
        },
      },
      { uuid: uuidN(2), user: 'bob', status: 'failed', createdAt: '2024-01-11T10:00:00.000Z', state: { final_summary_tokens: requests(1) } },
      {
        uuid: uuidN(3),
        user: 'alice',
        location: 'paused',
        createdAt: '2024-01-12T10:00:00.000Z',
        state: { prompt_tokens: 45_000, completion_tokens: 678, cached_tokens: 0, compaction_tokens: requests(2) },
      },
      { uuid: uuidN(4), user: 'carol', status: 'timeout', createdAt: '2024-01-13T10:00:00.000Z', completedAt: '2024-01-13T13:00:00.000Z' },
    ]
    for (const t of tasks) tree.write(t)
    reindex(tree)
    const config = configWith(tree, 'pricing:\n  gpt-4o:\n    prompt: 2.5\n    completion: 10\n    cached: 1.25\n    cache_write: 3.125\n')
    const stats = JSON.parse((await cliIn(['stats', '--json', '--home', tree.base, '--config', config])).stdout) as {
      total: number
      by_location: Record<string, number>
      by_status: Record<string, number>
      disk: Record<string, number>
      tokens: { total: number; prompt: number; completion: number; cached: number; cache_write: number; unsplit: number; cost_usd: number }
    }
    const scrape = async () => {
      const s = await startServe(tree.base, { config })
      const res = await s.get('/metrics')
      expect(res.status).toBe(200)
      expect(res.headers.get('content-type')).toMatch(/^text\/plain; version=0\.0\.4/)
      const text = await res.text()
      return { families: parseExposition(text), text, stop: () => s.child.kill('SIGTERM') }
    }
    const { families: m, text } = await scrape()
    for (const name of m.keys()) expect(name).toMatch(/^ctxagent_/)
    for (const f of m.values()) if (f.type === 'counter') expect(f.name).toMatch(/_total$/)
    expect(total(m, 'ctxagent_tasks')).toBe(stats.total)
    for (const [location, n] of Object.entries(stats.by_location)) expect(total(m, 'ctxagent_tasks', { location })).toBe(n)
    for (const [status, n] of Object.entries(stats.by_status)) expect(total(m, 'ctxagent_tasks', { status })).toBe(n)
    // The kinds partition the tokens: their sum is the tasks' total, each token counted once.
    expect(total(m, 'ctxagent_tokens_total')).toBe(stats.tokens.total)
    expect(total(m, 'ctxagent_tokens_total', { kind: 'input' })).toBe(stats.tokens.prompt - stats.tokens.cached - stats.tokens.cache_write)
    expect(total(m, 'ctxagent_tokens_total', { kind: 'cached' })).toBe(stats.tokens.cached)
    expect(total(m, 'ctxagent_tokens_total', { kind: 'cache_write' })).toBe(stats.tokens.cache_write)
    expect(stats.tokens.cache_write).toBe(4_000)
    expect((await cliIn(['stats', '--home', tree.base, '--config', config])).stdout).toContain('of which cached 10,000 and written to the cache 4,000')
    expect(total(m, 'ctxagent_tokens_total', { kind: 'output' })).toBe(stats.tokens.completion)
    expect(total(m, 'ctxagent_tokens_total', { kind: 'unsplit' })).toBe(stats.tokens.unsplit)
    expect(total(m, 'ctxagent_tokens_total', { user: 'alice', kind: 'input' })).toBe(71_000)
    // Every LLM request, by purpose: the turns and the summaries' requests each task's state.json recorded.
    const states = tasks.map((t) => JSON.parse(readFileSync(join(tree.dir(t), 'state.json'), 'utf8')) as Record<string, { requests?: number } | number>)
    const recorded = (key: string) => states.reduce((sum, st) => sum + ((st[key] as { requests?: number } | undefined)?.requests ?? 0), 0)
    const turns = states.reduce((sum, st) => sum + (st.llm_call_count as number), 0)
    expect(total(m, 'ctxagent_llm_calls_total', { purpose: 'turn' })).toBe(turns)
    expect(total(m, 'ctxagent_llm_calls_total', { purpose: 'summary' })).toBe(recorded('compaction_tokens'))
    expect(total(m, 'ctxagent_llm_calls_total', { purpose: 'final-summary' })).toBe(recorded('final_summary_tokens'))
    expect(recorded('compaction_tokens') + recorded('final_summary_tokens')).toBe(7)
    expect(total(m, 'ctxagent_llm_calls_total')).toBe(turns + 7)
    expect(total(m, 'ctxagent_turns_total')).toBe(turns)
    const build = m.get('ctxagent_build_info')?.samples ?? []
    expect(build).toHaveLength(1)
    expect(build[0]?.labels).toEqual({ version: (await cliIn(['--version'])).stdout.trim(), node: expect.stringMatching(/^v\d+\.\d+\.\d+$/) })
    expect(build[0]?.value).toBe(1)
    // The counter is the tasks' bills, as stats gives them: the turns and the 7 summary requests (docs/running.md#budgets),
    // 7 × (100 × $2.5 + 10 × $10) / 1e6 = $0.00245 of it.
    expect(total(m, 'ctxagent_cost_usd_total')).toBeCloseTo(stats.tokens.cost_usd, 6)
    expect(stats.tokens.cost_usd).toBeGreaterThan(0.00245)
    for (const location of ['running', 'paused', 'completed']) expect(total(m, 'ctxagent_disk_bytes', { location })).toBe(stats.disk[location])
    // Finished tasks' durations: the two fixture tasks ran for days (created on the 10th and 11th, done on the 15th), the timeout one 3h.
    const finished = (stats.by_status.completed ?? 0) + (stats.by_status.failed ?? 0) + (stats.by_status.timeout ?? 0)
    expect(total(m, 'ctxagent_task_duration_seconds', {}, 'ctxagent_task_duration_seconds_count')).toBe(finished)
    expect(finished).toBe(3)
    expect(total(m, 'ctxagent_task_duration_seconds', { le: '7200' }, 'ctxagent_task_duration_seconds_bucket')).toBe(0)
    expect(total(m, 'ctxagent_task_duration_seconds', { le: '21600' }, 'ctxagent_task_duration_seconds_bucket')).toBe(1)
    expect(total(m, 'ctxagent_task_duration_seconds', { le: '86400' }, 'ctxagent_task_duration_seconds_bucket')).toBe(1)
    expect(total(m, 'ctxagent_task_duration_seconds', { le: '+Inf' }, 'ctxagent_task_duration_seconds_bucket')).toBe(finished)
    // stats --check's alerts: 2 of 3 finished tasks failed, > 10 %.
    const check = JSON.parse((await cliIn(['stats', '--check', '--json', '--home', tree.base, '--config', config])).stdout) as {
      alerts: { metric: string; level: string }[]
    }
    for (const a of check.alerts) expect(total(m, 'ctxagent_alert', { name: a.metric, severity: a.level })).toBe(1)
    expect(total(m, 'ctxagent_alert', { name: 'failure_rate' })).toBe(1)
    expect(total(m, 'ctxagent_alert_status')).toBe(1)
    // No fleet here: its families are there, empty.
    expect(m.get('ctxagent_jobs')?.samples).toEqual([])
    // A restart of serve counts the same: counters come from the index, not from memory.
    const again = await scrape()
    expect(total(again.families, 'ctxagent_tokens_total')).toBe(total(m, 'ctxagent_tokens_total'))
    expect(again.text.replace(/^ctxagent_locks_stale.*$/m, '')).toBe(text.replace(/^ctxagent_locks_stale.*$/m, ''))
  })
})

describe('docs/grafana-dashboard.json', () => {
  it('queries only metrics /metrics exports', async () => {
    const { readFileSync } = await import('node:fs')
    const { METRICS } = await import('../../src/telemetry/names.js')
    const dashboard = JSON.parse(readFileSync(new URL('../../docs/grafana-dashboard.json', import.meta.url), 'utf8')) as {
      panels: { targets: { expr: string }[] }[]
    }
    const known = new Set<string>(Object.values(METRICS).flatMap((m) => [m, `${m}_bucket`, `${m}_sum`, `${m}_count`]))
    const used = dashboard.panels.flatMap((p) => p.targets.flatMap((t) => t.expr.match(/ctxagent_[a-z_]+/g) ?? []))
    expect(used.length).toBeGreaterThan(10)
    for (const name of used) expect(known, name).toContain(name)
  })
})
