import { writeFileSync } from 'node:fs'
import { describe, expect, it } from 'vitest'
import { cliIn } from '../helpers/in-process.js'
import { startServe } from '../serve/helpers.js'
import { onlyTask, runSetup } from './harness.js'

/*
 * Issue 40 #10: waits on the provider are sane and seen (docs/running.md#waits). A
 * Retry-After that asks for no wait (negative, a date gone by, 0) is retried with the
 * client's own backoff, not taken as the longest wait (llm.max_retry_wait, here 10
 * minutes: the test's timeout would end first); every wait is a log line with its
 * length and reason and a `wait` record that `view` shows.
 */

interface WaitLine {
  msg: string
  wait_ms: number
  wait_reason: string
}

async function retried(
  retryAfter: string,
): Promise<{ waits: WaitLine[]; view: string; viewJson: { waits: { plan_content: string }[] }; page: () => Promise<string> }> {
  const s = await runSetup()
  writeFileSync(s.config, s.fake.configYaml().replace('llm:\n', 'llm:\n  max_retry_wait: 600\n'))
  s.fake.queue.push({ status: 429, content: 'slow down', headers: { 'retry-after': retryAfter } })
  s.fake.fallback = (req) => (Array.isArray(req.body.tools) ? { content: 'done' } : { content: '## Original Task\nsummary' })
  const r = await s.run(['run', '--task', 't', '--workspace', s.ws, '--log-format', 'json'])
  expect(r.code, r.stderr).toBe(0)
  expect(s.fake.requests.filter((q) => Array.isArray(q.body.tools))).toHaveLength(2)
  const waits = r.stderr
    .split('\n')
    .filter((l) => l.includes('"wait_ms"'))
    .map((l) => JSON.parse(l) as WaitLine)
  const task = onlyTask(s.tree)
  expect(task.location).toBe('completed')
  const home = ['--home', s.tree.base, '--config', s.config]
  const view = (await cliIn(['view', task.uuid, ...home], { COLUMNS: '200' })).stdout
  const viewJson = JSON.parse((await cliIn(['view', task.uuid, '--json', ...home])).stdout) as { waits: { plan_content: string }[] }
  // The task page, from `serve` on the same tree.
  const page = async () => {
    const served = await startServe(s.tree.base, { config: s.config })
    return (await served.get(`/tasks/${task.uuid}`)).text()
  }
  return { waits, view, viewJson, page }
}

describe('waits on the provider', () => {
  for (const [what, value] of [
    ['a negative Retry-After', '-5'],
    ['a Retry-After date gone by', 'Wed, 21 Oct 2015 07:28:00 GMT'],
    ['Retry-After: 0', '0'],
  ] as const)
    it(`${what} is retried at once, with the client's backoff, and the wait is logged and shown by view`, { timeout: 60_000 }, async () => {
      const { waits, view, viewJson } = await retried(value)
      expect(waits).toHaveLength(1)
      const wait = waits[0] as WaitLine
      // The SDK's backoff for a first retry: half a second, less jitter; never the 600 s limit.
      expect(wait.wait_ms).toBeLessThanOrEqual(500)
      expect(wait.wait_reason).toBe(`the client's backoff (Retry-After: ${value}: no wait to honour)`)
      expect(wait.msg).toMatch(/^waiting 0\.\d s before retry 1: the provider answered 429; the client's backoff/)
      expect(view).toContain('Waits:')
      expect(view).toContain(wait.msg)
      expect(viewJson.waits.map((w) => w.plan_content)).toEqual([wait.msg])
    })

  it('a short wait the server asks for is taken, and leaves its trace like any other', { timeout: 60_000 }, async () => {
    const { waits, view, page } = await retried('1')
    expect(waits.map((w) => [w.wait_ms, w.wait_reason])).toEqual([[1000, 'the server asked (Retry-After: 1)']])
    expect(view).toContain('waiting 1.0 s before retry 1: the provider answered 429; the server asked (Retry-After: 1)')
    const html = await page()
    expect(html).toContain('<dt>Waits</dt>')
    expect(html).toContain('waiting 1.0 s before retry 1: the provider answered 429; the server asked (Retry-After: 1)')
  })
})
