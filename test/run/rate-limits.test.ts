import { writeFileSync } from 'node:fs'
import { describe, expect, it } from 'vitest'
import { exitOf } from '../helpers/wait.js'
import { onlyTask, readTask, runSetup, waitFor } from './harness.js'
import type { RunSetup } from './harness.js'

/** A turn waits at most a second for a server-chosen delay: longer is a usage limit. */
function shortWait(s: RunSetup): void {
  writeFileSync(s.config, s.fake.configYaml().replace('llm:\n', 'llm:\n  max_retry_wait: 1\n'))
}

describe("a provider's usage limit beyond a turn's wait", () => {
  it('run waits until it lifts (the reset the server gives), then goes on to completion without a retry spent early', async () => {
    const s = await runSetup()
    shortWait(s)
    s.fake.queue.push({ status: 429, content: 'usage limit reached', headers: { 'retry-after': '2' } })
    s.fake.fallback = (req) => (Array.isArray(req.body.tools) ? { content: 'done after the limit' } : { content: '## Original Task\nsummary' })
    const r = await s.run(['run', '--task', 't', '--workspace', s.ws, '--log-format', 'json'])
    expect(r.code, r.stderr).toBe(0)
    // The 429, then the same request once the limit lifted: the SDK did not retry it within the limit.
    expect(s.fake.requests.filter((q) => Array.isArray(q.body.tools))).toHaveLength(2)
    expect(r.stderr).toMatch(/waiting until .*: the provider's usage limit on this API key lifts then/)
    expect(onlyTask(s.tree)).toMatchObject({ location: 'completed', state: { status: 'completed' } })
  })

  it('--no-wait pauses (exit 1, rate-limit, resume_at); a second task on the same key then sends nothing and pauses too', async () => {
    const s = await runSetup()
    shortWait(s)
    s.fake.fallback = () => ({ status: 429, content: 'usage limit reached', headers: { 'retry-after': '3600' } })
    const before = Date.now()
    const first = await s.run(['run', '--task', 'one', '--workspace', s.ws, '--no-wait', '--log-format', 'json', '--json'])
    expect(first.code, first.stderr).toBe(1)
    expect(s.fake.requests).toHaveLength(1)
    const paused = onlyTask(s.tree)
    expect(paused.state).toMatchObject({ status: 'paused', paused_by: 'rate-limit', llm_failure: 'rate_limited', budget_cap: null })
    // --json's outcome says why and until when (docs/running.md#rate-limits).
    expect(JSON.parse(first.stdout)).toMatchObject({
      uuid: paused.uuid,
      status: 'paused',
      paused_by: 'rate-limit',
      resume_at: paused.state.resume_at,
      budget_cap: null,
      exit_code: 1,
    })
    // An hour after the 429 was answered (between the test's clock readings around it).
    const at = Date.parse(paused.state.resume_at as string)
    expect(at).toBeGreaterThanOrEqual(before + 3_600_000 - 1000)
    expect(at).toBeLessThanOrEqual(Date.now() + 3_600_000 + 1000)
    // The limit is the key's, recorded in the index: the second task knows it before it sends.
    const second = await s.run(['run', '--task', 'two', '--workspace', s.ws, '--no-wait', '--log-format', 'json'])
    expect(second.code, second.stderr).toBe(1)
    expect(s.fake.requests).toHaveLength(1)
    const others = s.tree.layout.list('paused').filter((uuid) => uuid !== paused.uuid)
    expect(others).toHaveLength(1)
    expect(readTask(s.tree, others[0] as string).state).toMatchObject({ paused_by: 'rate-limit', resume_at: paused.state.resume_at })
  })

  it('a wait for a usage limit ends at once on SIGTERM: the task pauses (exit 143) with no request sent after the limit', async () => {
    const s = await runSetup()
    shortWait(s)
    s.fake.fallback = () => ({
      status: 429,
      content: 'usage limit reached',
      headers: { 'x-ratelimit-reset-tokens': '59m0s', 'x-ratelimit-remaining-tokens': '0' },
    })
    const started = s.start(['run', '--task', 't', '--workspace', s.ws, '--log-format', 'json'])
    await waitFor('the wait', () => /waiting/.test(started.err()))
    started.child.kill('SIGTERM')
    expect((await exitOf(started.child)).code).toBe(143)
    expect(s.fake.requests).toHaveLength(1)
    expect(onlyTask(s.tree).state).toMatchObject({ status: 'paused', paused_by: 'signal' })
  })
})
