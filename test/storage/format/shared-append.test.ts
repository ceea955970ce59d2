import { appendFileSync, mkdirSync, readFileSync, rmdirSync, utimesSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { appendMutexPath } from '../../../src/storage/fs/append-mutex.js'
import { appendShared } from '../../../src/storage/format/jsonl.js'
import { makeTree } from '../../fixtures/tree.js'
import { helperWithStdin } from '../../helpers/run.js'
import { exitOf, lineFrom } from '../../helpers/wait.js'

function records(file: string): { writer: string; i: number }[] {
  const lines = readFileSync(file, 'utf8').split('\n')
  expect(lines.pop()).toBe('')
  return lines.map((line) => JSON.parse(line) as { writer: string; i: number })
}

describe('appendShared: appends by several hosts without O_APPEND (docs/contract.md §14.3)', () => {
  it('four processes writing at the size they read (what NFS does) lose nothing: every record whole, once, in order per writer', async () => {
    const file = join(makeTree().base, 'inbox.jsonl')
    const writers = ['a', 'b', 'c', 'd'].map((w) => helperWithStdin('shared-append-loop.mjs', [file, w, '400']))
    await Promise.all(writers.map((w) => lineFrom(w, /ready/)))
    for (const w of writers) w.stdin.write('go\n')
    expect((await Promise.all(writers.map(exitOf))).map((e) => e.code)).toEqual([0, 0, 0, 0])
    const next: Record<string, number> = { a: 0, b: 0, c: 0, d: 0 }
    for (const record of records(file)) expect(record.i).toBe(next[record.writer]!++)
    expect(next).toEqual({ a: 400, b: 400, c: 400, d: 400 })
  })

  it('waits for a writer holding the mutex, and goes on the moment it is released', async () => {
    const file = join(makeTree().base, 'audit.jsonl')
    mkdirSync(appendMutexPath(file))
    const writer = helperWithStdin('shared-append-loop.mjs', [file, 'w', '1'])
    await lineFrom(writer, /ready/)
    writer.stdin.write('go\n')
    // It cannot have written while the mutex is held: nothing there yet.
    expect(() => readFileSync(file)).toThrow(/ENOENT/)
    rmdirSync(appendMutexPath(file))
    expect((await exitOf(writer)).code).toBe(0)
    expect(records(file)).toEqual([{ writer: 'w', i: 0, pad: '' }])
  })

  it('takes over a mutex left by a writer that died holding it, and keeps a torn tail a line of its own', () => {
    const file = join(makeTree().base, 'inbox.jsonl')
    appendShared(file, { n: 1 })
    // A writer killed mid-line, holding the mutex: a fragment without its newline, and a mutex nobody will release.
    const torn = '{"n":2,"pa'
    appendFileSync(file, torn)
    mkdirSync(appendMutexPath(file))
    const old = new Date(Date.now() - 60_000)
    utimesSync(appendMutexPath(file), old, old)
    appendShared(file, { n: 3 })
    expect(readFileSync(file, 'utf8')).toBe(`{"n":1}\n${torn}\n{"n":3}\n`)
  })
})
