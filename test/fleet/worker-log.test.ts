import { PassThrough } from 'node:stream'
import { describe, expect, it } from 'vitest'
import { asText, createWorkerLog, problemIn } from '../../src/fleet/worker/worker-log.js'
import { logJobEnd } from '../../src/fleet/worker/job-settle.js'
import type { Ended, Job, JobEnd } from '../../src/fleet/queue/job.js'
import { plannedWait } from '../../src/commands/run/run-outcome.js'
import type { Outcome } from '../../src/run/outcome.js'

function captured(format: 'text' | 'json') {
  const stream = new PassThrough()
  const chunks: string[] = []
  stream.on('data', (c: Buffer) => chunks.push(c.toString()))
  const log = createWorkerLog(format, stream)
  log.setId('w1')
  return {
    log,
    lines: () =>
      chunks
        .join('')
        .split('\n')
        .filter((l) => l !== ''),
  }
}

const uuid = '1a2b3c4d-0000-4000-8000-000000000000'
const agentLines = [
  JSON.stringify({ ts: '2026-11-28T10:00:00.000Z', level: 'info', uuid, msg: 'started local_task in /ws (m at http://llm, dir /t)' }),
  JSON.stringify({ ts: '2026-11-28T10:00:01.000Z', level: 'info', uuid, msg: 'turn', turn: 1, llm_ms: 12 }),
  JSON.stringify({ ts: '2026-11-28T10:00:02.000Z', level: 'warn', uuid, msg: 'the index could not be written \u001b[31m(retried)' }),
  'a stray line from node',
]

describe("a worker's log", () => {
  it("in text, renders its agents' JSON lines as run does on a terminal: no JSON line, no escape, no turn timings", () => {
    const { log, lines } = captured('text')
    const relay = log.relay(42)
    // Split mid-line, as a pipe delivers it.
    const all = `${agentLines.join('\n')}\n`
    relay(Buffer.from(all.slice(0, 70)))
    relay(Buffer.from(all.slice(70)))
    expect(lines()).toEqual([
      'ctxagent worker w1: [uuid:1a2b3c4d] started local_task in /ws (m at http://llm, dir /t)',
      'ctxagent worker w1: [uuid:1a2b3c4d] warning: the index could not be written (retried)',
      'ctxagent worker w1: a stray line from node',
    ])
    for (const line of lines()) expect(line.slice(line.indexOf(': ') + 2)).not.toMatch(/^\{/)
  })

  it("in JSON, passes its agents' lines on as they are and wraps what is not JSON", () => {
    const { log, lines } = captured('json')
    log.relay(42)(Buffer.from(`${agentLines.join('\n')}\n`))
    const out = lines().map((l) => JSON.parse(l) as Record<string, unknown>)
    expect(out.slice(0, 3)).toEqual(agentLines.slice(0, 3).map((l) => JSON.parse(l)))
    expect(out[3]).toMatchObject({ level: 'warn', worker: 'w1', msg: 'a stray line from node', pid: 42 })
  })

  it('explains an end by the last problem an agent reported, never by a progress line', () => {
    expect(problemIn(agentLines[0] ?? '')).toBeNull()
    expect(problemIn(agentLines[1] ?? '')).toBeNull()
    expect(problemIn(agentLines[2] ?? '')).toBe('the index could not be written \u001b[31m(retried)')
    expect(problemIn('ctxagent: cannot reach LLM server (check llm.openai.base_url)')).toBe('ctxagent: cannot reach LLM server (check llm.openai.base_url)')
    expect(problemIn('  ')).toBeNull()
    expect(asText(agentLines[1] ?? '')).toBeNull()
  })
})

describe("a planned wait in a worker's log (docs/running.md#waits)", () => {
  const job: Job = { id: 7, task_uuid: uuid, kind: 'new', spec: {}, state: 'running', priority: 0, attempts: 1, claimed_by: 'w1', user: null }
  const until = '2026-12-06T10:00:00.000Z'
  const error = 'http://llm answered 429: a usage limit until 2026-12-06T10:00:00.000Z: usage limit reached'

  function ended(end: JobEnd, state: Ended) {
    const { log, lines } = captured('text')
    logJobEnd({ log: (l) => log.info(l), warn: (l) => log.warn(l), error: (l) => log.error(l) }, job, end, state)
    return lines()
  }

  it('a job waiting out a usage limit or a budget window is news with its reason and time, never a warning or an error', () => {
    const limit = ended(
      { outcome: 'paused', error, wait: { until, reason: 'rate-limit', cap: null, maxWaitSeconds: 86_400 } },
      { state: 'retrying', resumed: false, retry_in: null, wait: 'rate-limit' },
    )
    expect(limit).toEqual([`ctxagent worker w1: job 7: paused; waits until ${until} (rate-limit; no attempt spent, its slot free meanwhile): ${error}`])
    const budget = ended(
      { outcome: 'paused', error: 'the user-daily cap is spent', wait: { until, reason: 'budget', cap: 'user-daily', maxWaitSeconds: null } },
      { state: 'retrying', resumed: false, retry_in: null, wait: 'budget' },
    )
    expect(budget[0]).toMatch(/^ctxagent worker w1: job 7: paused; waits until \S+ \(budget user-daily; no attempt spent/)
    // A retry after a failure stays a warning, a failed job an error.
    expect(ended({ outcome: 'paused', error: 'answered 503' }, { state: 'retrying', resumed: false, retry_in: 1.5 })[0]).toMatch(
      /: warning: job 7: paused; retrying in 1.5s/,
    )
    expect(ended({ outcome: 'failed', error: 'boom' }, { state: 'failed', resumed: false, retry_in: null })[0]).toMatch(
      /: error: job 7: failed \(job failed: boom\)/,
    )
  })

  it("its agent's own line for the pause is an info line with wait_reason and wait_until, which the text log shows without error:", () => {
    const outcome: Outcome = {
      uuid,
      status: 'paused',
      location: 'paused',
      dir: '/t',
      turns: 1,
      tokens: 10,
      duration_ms: 5,
      final_answer: null,
      finish_status: null,
      error,
      inherited_from: null,
      exit_code: 1,
      paused_by: 'rate-limit',
      resume_at: until,
      budget_cap: null,
    }
    expect(plannedWait(outcome)).toEqual({ wait_reason: 'rate-limit', wait_until: until })
    expect(plannedWait({ ...outcome, paused_by: 'budget', budget_cap: 'user-daily' })).toEqual({ wait_reason: 'budget', wait_until: until })
    // A pause with no time (the task's own cap, an operator's pause, an outage) is no planned wait.
    expect(plannedWait({ ...outcome, paused_by: 'budget', resume_at: null })).toBeNull()
    expect(plannedWait({ ...outcome, paused_by: 'llm' })).toBeNull()
    expect(plannedWait({ ...outcome, status: 'failed' })).toBeNull()
  })
})
