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
})
