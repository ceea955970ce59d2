import { spawn } from 'node:child_process'
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { makeTree, uuidN } from '../fixtures/tree.js'
import type { Tree } from '../fixtures/tree.js'
import { cli, BIN, ROOT, TEST_ENV } from '../helpers/run.js'
import { cliIn } from '../helpers/in-process.js'

/*
 * Issue #28: tables fit the terminal (80 columns when it does not say), the widest column
 * cut with an ellipsis, never wrapped; piped, they are tab-separated rows under a header
 * row, for cut, awk and sort.
 */

const NOW = { CTXAGENT_NOW: '2024-02-01T00:00:00.000Z' }
const LONG_TASK = '請求書モジュールの CSV エクスポートが最後の行を落とすので直してください、テストも追加して'

/** Tasks with long text (wide characters too), a user with a tab in it, several statuses. */
function tree(): Tree {
  const t = makeTree()
  t.write({ uuid: uuidN(0xa1), location: 'completed', user: 'alice', createdAt: '2024-01-10T09:00:00.000Z', messages: 4 })
  t.write({ uuid: uuidN(0xb2), location: 'paused', user: 'bob\tthe builder', createdAt: '2024-01-20T09:00:00.000Z' })
  const dir = t.write({
    uuid: uuidN(0xc3),
    location: 'completed',
    status: 'failed',
    user: 'a-user-with-a-rather-long-name',
    createdAt: '2024-01-25T09:00:00.000Z',
  })
  const messages = [
    { seq: 1, role: 'system', content: 'you are an agent', timestamp: '2024-01-25T09:00:00.000Z', token_count: 5 },
    { seq: 2, role: 'user', content: `${LONG_TASK}\nsecond line`, timestamp: '2024-01-25T09:00:00.000Z', token_count: 5 },
  ]
  writeFileSync(join(dir, 'messages.jsonl'), messages.map((m) => `${JSON.stringify(m)}\n`).join(''))
  return t
}

/** `ctxagent <args>` on a pseudo-terminal of `columns` columns (0: one that does not say), in colour; stdout only, colour taken out. */
function onTerminal(args: string[], columns: number): Promise<string> {
  const command = [process.execPath, BIN, ...args].map((a) => `'${a.replace(/'/g, "'\\''")}'`).join(' ')
  const size = columns > 0 ? `stty cols ${columns} rows 50; ` : ''
  return new Promise((resolve, reject) => {
    const child = spawn('script', ['-qfec', `${size}exec ${command} 2>/dev/null`, '/dev/null'], {
      cwd: ROOT,
      env: { ...process.env, ...TEST_ENV, ...NOW, NO_COLOR: '', TERM: 'xterm' },
      stdio: ['ignore', 'pipe', 'pipe'],
    })
    let out = ''
    child.stdout.on('data', (d: Buffer) => (out += d.toString('utf8')))
    child.on('error', reject)
    child.on('close', () => resolve(out.replace(/\r\n/g, '\n').replace(/\x1b\[[0-9;]*m/g, '')))
  })
}

/** Columns a line takes on screen: East Asian wide characters two each. */
function displayWidth(line: string): number {
  let width = 0
  for (const ch of line)
    width +=
      /[\u1100-\u115f\u2e80-\u303e\u3041-\u33ff\u3400-\u4dbf\u4e00-\u9fff\ua000-\ua4cf\uac00-\ud7a3\uf900-\ufaff\ufe30-\ufe4f\uff00-\uff60\uffe0-\uffe6]/.test(
        ch,
      )
        ? 2
        : 1
  return width
}

const BOX = /^[┌│├└]/

describe('tables on a pipe', () => {
  it("list: a header row, then one tab-separated row per task, no borders, no padding; a field's tab and line break become spaces", async () => {
    const t = tree()
    const res = await cliIn(['list', '--home', t.base], NOW)
    expect(res.code, res.stderr).toBe(0)
    const rows = res.stdout
      .trimEnd()
      .split('\n')
      .map((l) => l.split('\t'))
    expect(rows[0]).toEqual(['uuid', 'status', 'age', 'user', 'model', 'workspace', 'turns', 'tokens', 'task'])
    expect(rows).toHaveLength(4)
    for (const row of rows) expect(row).toHaveLength(9)
    expect(res.stdout).not.toMatch(/[│┌└─]|\x1b/)
    const byUuid = Object.fromEntries(rows.slice(1).map((r) => [r[0], r]))
    expect(byUuid[uuidN(0xb2).slice(0, 8)]?.[3]).toBe('bob the builder')
    expect(byUuid[uuidN(0xc3).slice(0, 8)]?.[1]).toBe('failed')
    // No padding: every field is as printed, without spaces around it.
    for (const row of rows) for (const field of row) expect(field).toBe(field.trim())
  })

  it('list: the "and N more" hint goes to stderr, so stdout stays rows; an empty result is the header alone', async () => {
    const t = tree()
    const res = await cliIn(['list', '--limit', '1', '--home', t.base], NOW)
    expect(res.code).toBe(0)
    expect(res.stdout.trimEnd().split('\n')).toHaveLength(2)
    expect(res.stderr).toContain('… and 2 more (--all, or --limit N)')
    const none = await cliIn(['list', '--user', 'nobody', '--home', t.base], NOW)
    expect(none.code).toBe(0)
    expect(none.stdout).toBe('uuid\tstatus\tage\tuser\tmodel\tworkspace\tturns\ttokens\ttask\n')
  })

  it('stats and cleanup --dry-run: their tables are tab-separated too, under a header row', async () => {
    const t = tree()
    const stats = await cliIn(['stats', '--home', t.base], NOW)
    expect(stats.code, stats.stderr).toBe(0)
    const lines = stats.stdout.split('\n')
    const head = lines.indexOf('user\ttasks\tshare\ttokens\tavg duration')
    expect(head).toBeGreaterThan(-1)
    expect(
      lines
        .slice(head + 1)
        .filter(Boolean)
        .map((l) => l.split('\t')[0])
        .sort(),
    ).toEqual(['a-user-with-a-rather-long-name', 'alice', 'bob the builder'])
    const cleanup = cli(['cleanup', '--dry-run', '--compress-after', '1d', '--home', t.base], NOW)
    expect(cleanup.code, cleanup.stderr).toBe(0)
    const rows = cleanup.stdout
      .split('\n')
      .filter((l) => l.includes('\t'))
      .map((l) => l.split('\t'))
    expect(rows[0]).toEqual(['uuid', 'action', 'age', 'detail'])
    expect(
      rows
        .slice(1)
        .map((r) => [r[0], r[1]])
        .sort(),
    ).toEqual([
      [uuidN(0xa1), 'would gzip'],
      [uuidN(0xc3), 'would gzip'],
    ])
  })
})

describe('tables on a terminal', () => {
  it.each([80, 40, 0])('list and stats fit a terminal of %i columns (0: one that does not say, taken as 80), cut with an ellipsis', async (columns) => {
    const t = tree()
    const width = columns || 80
    const list = (await onTerminal(['list', '--home', t.base], columns)).split('\n').filter(Boolean)
    expect(list.filter((l) => BOX.test(l))).toHaveLength(list.length) // every line is the table's
    expect(list.length).toBe(3 + 1 + 2) // top, header, separator, three tasks, bottom: one line each, none wrapped
    for (const line of list) expect(displayWidth(line), line).toBeLessThanOrEqual(width)
    expect(list.join('\n')).toContain('…')
    if (width >= 80) expect(list.join('\n')).toContain(uuidN(0xa1).slice(0, 8)) // an id is the last to be cut
    const stats = (await onTerminal(['stats', '--home', t.base], columns)).split('\n').filter((l) => BOX.test(l))
    expect(stats.length).toBe(3 + 1 + 2)
    for (const line of stats) expect(displayWidth(line), line).toBeLessThanOrEqual(width)
  })

  it('a table narrower than the terminal is left as it is', async () => {
    const t = makeTree()
    t.write({ uuid: uuidN(0xa1), location: 'completed', user: 'al', createdAt: '2024-01-10T09:00:00.000Z' })
    const stats = (await onTerminal(['stats', '--home', t.base], 200)).split('\n').filter((l) => BOX.test(l))
    expect(stats.join('\n')).not.toContain('…')
    expect(stats.join('\n')).toMatch(/│ al +│ 1 +│ 100% +│/)
  })
})
