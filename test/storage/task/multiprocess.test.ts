import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { MessageStore } from '../../../src/storage/task/message-store.js'
import { makeTree } from '../../fixtures/tree.js'
import { helper } from '../../helpers/run.js'
import { exitOf, lineFrom, sleep } from '../../helpers/wait.js'

describe('appends from real processes', () => {
  it('two processes appending 10,000 records each never interleave', async () => {
    const file = join(makeTree().base, 'messages.jsonl')
    const writers = [helper('append-loop.mjs', [file, 'a', '10000']), helper('append-loop.mjs', [file, 'b', '10000'])]
    const exits = await Promise.all(writers.map(exitOf))
    expect(exits.map((e) => e.code)).toEqual([0, 0])
    const lines = readFileSync(file, 'utf8').split('\n')
    expect(lines.pop()).toBe('')
    expect(lines).toHaveLength(20_000)
    const next = { a: 0, b: 0 }
    for (const line of lines) {
      const record = JSON.parse(line) as { writer: 'a' | 'b'; i: number; pad: string }
      expect(record.i).toBe(next[record.writer]++)
      expect(record.pad.length).toBe((record.i * 7919) % 20000)
    }
    expect(next).toEqual({ a: 10_000, b: 10_000 })
  })

  it('a writer killed with SIGKILL leaves at most a torn tail; reopening repairs it and seq continues', async () => {
    const dir = makeTree().base
    const child = helper('message-loop.mjs', [dir])
    await lineFrom(child, /ready/)
    await sleep(150)
    child.kill('SIGKILL')
    await exitOf(child)
    const raw = readFileSync(join(dir, 'messages.jsonl'), 'utf8')
    const complete = raw
      .slice(0, raw.lastIndexOf('\n') + 1)
      .split('\n')
      .filter(Boolean)
    const seqs = complete.map((l) => (JSON.parse(l) as { seq: number }).seq)
    expect(seqs).toEqual(seqs.map((_, i) => i + 1))

    const store = MessageStore.open(dir)
    expect(store.lastSeq).toBe(seqs.length)
    store.add({ role: 'user', content: 'after the crash' })
    store.close()
    const after = readFileSync(join(dir, 'messages.jsonl'), 'utf8').trimEnd().split('\n')
    const parsed = after.map((l) => JSON.parse(l) as { seq: number })
    expect(parsed.map((m) => m.seq)).toEqual(parsed.map((_, i) => i + 1))
  })
})
