import { PassThrough } from 'node:stream'
import { describe, expect, it } from 'vitest'
import { createIo } from '../src/io.js'
import { table } from '../src/render.js'

/** An Io whose stdout is a terminal of `columns` columns (undefined: one that does not say), or a pipe. */
function ioOf(tty: boolean, columns?: number) {
  const stdout = Object.assign(new PassThrough(), { isTTY: tty, columns }) as unknown as NodeJS.WriteStream
  return createIo({ stdout, stderr: new PassThrough() as unknown as NodeJS.WriteStream, env: {} })
}

const HEAD = ['id', 'state', 'kind', 'task', 'user', 'host', 'tries', 'prio', 'created', 'claimed', 'finished', 'last error']
const ROWS = [
  [
    '17',
    'failed',
    'run',
    '0a1b2c3d',
    'alice',
    'worker-node-1.example.internal',
    '3',
    '0',
    '2h ago',
    '2h ago',
    '1h ago',
    'the LLM (gpt-4o) could not be reached: connect ECONNREFUSED 127.0.0.1:8000',
  ],
  ['18', 'waiting', 'resume', '4e5f6a7b', 'bob', '-', '0', '5', '3m ago', '-', '-', ''],
]

const widths = (text: string) => text.split('\n').map((l) => [...l.replace(/\x1b\[[0-9;]*m/g, '')].length)

describe('table', () => {
  it.each([200, 80, 40, 20, 5])('on a terminal of %i columns, no line is wider (under 20: as if 20), one line per row', (columns) => {
    const text = table(ioOf(true, columns), HEAD, ROWS)
    for (const w of widths(text)) expect(w).toBeLessThanOrEqual(Math.max(columns, 20))
    expect(text.split('\n')).toHaveLength(ROWS.length + 3)
  })

  it('cuts the widest column first, and keeps short ones whole while it can', () => {
    const text = table(ioOf(true, 120), HEAD, ROWS)
    expect(text).toContain('last error')
    expect(text).toContain('the LLM')
    expect(text).not.toContain('ECONNREFUSED 127.0.0.1:8000')
    expect(text).toContain('4e5f6a7b')
  })

  it('takes a terminal that does not say as 80 columns wide', () => {
    expect(Math.max(...widths(table(ioOf(true), HEAD, ROWS)))).toBe(80)
  })

  it('leaves a table that fits as cli-table3 draws it', () => {
    const text = table(ioOf(true, 80), ['a', 'b'], [['1', 'two']])
    expect(text.replace(/\x1b\[[0-9;]*m/g, '').split('\n')).toEqual(['┌───┬─────┐', '│ a │ b   │', '│ 1 │ two │', '└───┴─────┘'])
  })

  it("on a pipe: a header row and tab-separated rows, a field's tabs and line breaks as spaces, whole", () => {
    const text = table(
      ioOf(false, 40),
      ['uuid', 'task'],
      [
        ['0a1b2c3d', 'line one\nline\ttwo\r\nthree'],
        ['4e5f6a7b', 7],
      ],
    )
    expect(text).toBe('uuid\ttask\n0a1b2c3d\tline one line two three\n4e5f6a7b\t7')
  })
})
