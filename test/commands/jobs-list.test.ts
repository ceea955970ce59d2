import { describe, expect, it } from 'vitest'
import { renderJobList } from '../../src/commands/jobs.js'
import type { JobRow } from '../../src/fleet/queue/job-admin.js'
import { createIo } from '../../src/io.js'

const NOW = new Date('2026-11-28T12:00:00.000Z')

function row(id: number, over: Partial<JobRow>): JobRow {
  return {
    id,
    state: 'waiting',
    kind: 'new',
    task_uuid: `${id.toString(16).padStart(8, '0')}-1111-4222-8333-444455556666`,
    user: 'alice',
    host: null,
    attempts: 0,
    priority: 0,
    created_at: '2026-11-28T11:00:00.000Z',
    claimed_at: null,
    finished_at: null,
    next_run_at: null,
    outcome: null,
    error: null,
    key: null,
    cancel_requested: false,
    what: 'fix the failing test',
    waiting_for: null,
    wait_cap: null,
    waits: 0,
    ...over,
  }
}

/** What `jobs` prints on a terminal of `columns` columns (colour off). */
function onTerminal(rows: JobRow[], columns: number): string[] {
  let _text = ''
  const stdout = { isTTY: true, columns, write: (s: string) => ((_text += s), true) } as unknown as NodeJS.WriteStream
  const io = createIo({ stdout, color: false, env: {} })
  return renderJobList({ io, now: () => NOW }, rows).split('\n')
}

const rows = [
  row(3, {
    state: 'running',
    host: 'build-7.internal.example.com',
    claimed_at: '2026-11-28T11:30:00.000Z',
    attempts: 1,
    what: 'The CSV export drops the last row of every invoice; find out why and fix it, with a test',
  }),
  row(2, {
    state: 'done',
    outcome: 'completed',
    host: 'build-8',
    claimed_at: '2026-11-28T11:10:00.000Z',
    finished_at: '2026-11-28T11:20:00.000Z',
    attempts: 1,
    what: 'acme/shop#42',
  }),
  row(1, {
    state: 'failed',
    outcome: 'failed',
    host: 'build-8',
    attempts: 3,
    finished_at: '2026-11-28T11:05:00.000Z',
    error: 'cannot reach LLM server http://llm:8000/v1 (openai, model qwen): connection refused',
    what: 'resume 0000000a',
  }),
]

describe('jobs on a terminal', () => {
  it('fits 80 columns by choosing columns: the id, state, whole task id, what and last error stay', () => {
    const lines = onTerminal(rows, 80)
    for (const line of lines) expect(line.length, line).toBeLessThanOrEqual(80)
    const head = lines.find((l) => l.includes('state')) ?? ''
    for (const column of ['id', 'state', 'task', 'what', 'last error']) expect(head).toContain(column)
    expect(head).not.toContain('prio')
    for (const r of rows)
      expect(
        lines.some((l) => l.includes(r.task_uuid.slice(0, 8))),
        r.task_uuid,
      ).toBe(true)
  })

  it('shows what a finished job became beside its state, and only errors as errors', () => {
    const lines = onTerminal(rows, 400)
    const head = lines.find((l) => l.includes('state')) ?? ''
    expect(head).toContain('prio')
    const done = lines.find((l) => l.includes('00000002')) ?? ''
    expect(done).toContain('done (completed)')
    expect(done.slice(done.lastIndexOf('│', done.length - 2))).not.toContain('completed')
    expect(lines.find((l) => l.includes('00000001'))).toContain('connection refused')
  })
})
