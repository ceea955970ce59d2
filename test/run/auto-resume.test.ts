import { writeFileSync } from 'node:fs'
import Database from 'better-sqlite3'
import { describe, expect, it } from 'vitest'
import { findingsText } from '../helpers/run.js'
import { alive } from '../helpers/wait.js'
import { expectContinuousSeq, readTask, runSetup, waitFor } from './harness.js'

/**
 * docs/running.md#pauses-that-end-by-themselves: on one host, watch-locks resumes a task
 * paused until a usage limit lifts once that time has come, by its own clock, which the
 * test pins with CTXAGENT_NOW (no waiting an hour, no wall time).
 */
const finish = { calls: [{ name: 'finish', arguments: { summary: 'done', status: 'done' } }] }

describe('watch-locks on one host', () => {
  it('resumes a task paused by a usage limit once the limit has lifted, not before; the resumed run completes it', async () => {
    const s = await runSetup()
    writeFileSync(s.config, s.fake.configYaml('').replace('llm:\n', 'llm:\n  max_retry_wait: 0.05\n'))
    let limited = true
    s.fake.fallback = () => (limited ? { status: 429, headers: { 'retry-after': '3600' }, content: 'usage limit reached' } : finish)
    // --no-wait: pause at the limit (without it, run waits the hour out: docs/running.md#rate-limits).
    const run = await s.run(['run', '--task', 'alpha', '--workspace', s.ws, '--no-wait'])
    expect(run.code).toBe(1)
    const uuid = s.tree.layout.list('paused')[0] as string
    const paused = readTask(s.tree, uuid)
    expect(paused.state).toMatchObject({ status: 'paused', llm_failure: 'rate_limited' })
    const resumeAt = Date.parse(paused.state.resume_at as string)
    expect(resumeAt - Date.now()).toBeGreaterThan(3_500_000)
    // Half an hour on: the limit still holds, nothing is started.
    const early = await s.run(['watch-locks', '--once', '--json'], { CTXAGENT_NOW: new Date(resumeAt - 1_800_000).toISOString() })
    expect(early.code, early.stderr).toBe(0)
    expect(findingsText(early.stdout).trim()).toBe('')
    expect(early.stdout).toContain('"resumed":0')
    const sent = s.fake.requests.length
    expect(readTask(s.tree, uuid).location).toBe('paused')
    // Past the reset: its resume starts, and completes the task.
    limited = false
    // Time passing lifts the key's own record too (llm_key_limits, which the resumed run reads, by the wall clock, before sending).
    const db = new Database(s.tree.layout.db)
    try {
      expect(db.prepare('DELETE FROM llm_key_limits').run().changes).toBe(1)
    } finally {
      db.close()
    }
    const late = await s.run(['watch-locks', '--once', '--json'], { CTXAGENT_NOW: new Date(resumeAt + 1_000).toISOString() })
    expect(late.code, late.stderr).toBe(0)
    const started = JSON.parse(findingsText(late.stdout).trim()) as { pid: number }
    expect(started).toMatchObject({ uuid, action: 'resume_started', reason: 'rate-limit', resume_at: new Date(resumeAt).toISOString() })
    // Detached: it outlives the pass, and ends by itself.
    await waitFor('the resumed run to end', () => !alive(started.pid), 60_000)
    const done = readTask(s.tree, uuid)
    expect(done.state.status).toBe('completed')
    expectContinuousSeq(done.messages)
    expect(s.fake.requests.length).toBeGreaterThan(sent)
  })

  it('leaves a budget pause whose day has reset but which another cap (the month’s) still stops: no resume started each pass; a raised cap resumes it', async () => {
    const s = await runSetup()
    const priced = (monthly: number) =>
      writeFileSync(
        s.config,
        `${s.fake.configYaml(`budgets:\n  user_daily_usd: 0.25\n  user_monthly_usd: ${monthly}\n`).replace('llm:\n', 'llm:\n  max_output_tokens: 100\n')}pricing:\n  fake-model:\n    prompt: 0\n    completion: 1000\n`,
      )
    priced(0.25)
    // Each request may cost $0.10 and costs that much: two fit the day's $0.25, the third would pass it.
    const usage = { prompt_tokens: 50, completion_tokens: 100, total_tokens: 150 }
    s.fake.fallback = (req) =>
      Array.isArray(req.body.tools)
        ? { calls: [{ name: 'glob', arguments: { pattern: `*${s.fake.requests.length}*` } }], usage }
        : { content: 'summary', usage }
    const run = await s.run(['run', '--task', 'alpha', '--workspace', s.ws], { CTXAGENT_NOW: '2026-11-28T10:00:00.000Z' })
    expect(run.code, run.stderr).toBe(5)
    const uuid = s.tree.layout.list('paused')[0] as string
    expect(readTask(s.tree, uuid).state).toMatchObject({ paused_by: 'budget', budget_cap: 'user-daily', resume_at: '2026-11-29T00:00:00.000Z' })
    const sent = s.fake.requests.length
    // The next day: the day's cap has reset, the month's ($0.20 of $0.25, a request may cost $0.10) has not.
    for (let pass = 0; pass < 2; pass++) {
      const next = await s.run(['watch-locks', '--once', '--json'], { CTXAGENT_NOW: '2026-11-29T08:00:00.000Z' })
      expect(next.code, next.stderr).toBe(0)
      expect(next.stdout).toContain('"resumed":0')
    }
    expect(readTask(s.tree, uuid).location).toBe('paused')
    expect(s.fake.requests.length).toBe(sent)
    // The month's cap raised: the next pass starts its resume.
    priced(10)
    const raised = await s.run(['watch-locks', '--once', '--json'], { CTXAGENT_NOW: '2026-11-29T08:00:00.000Z' })
    const started = JSON.parse(findingsText(raised.stdout).trim()) as { pid: number }
    expect(started).toMatchObject({ uuid, action: 'resume_started', reason: 'budget' })
    await waitFor('the resumed run to end', () => !alive(started.pid), 60_000)
  })
})
