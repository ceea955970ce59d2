import { PassThrough } from 'node:stream'
import { describe, expect, it } from 'vitest'
import { asText, createWorkerLog, problemIn } from '../../src/fleet/worker/worker-log.js'

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
