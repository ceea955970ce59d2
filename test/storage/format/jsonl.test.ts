import { appendFileSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { gzipSync } from 'node:zlib'
import { describe, expect, it } from 'vitest'
import { appendShared, JsonlAppender, lastRecordSync, readJsonl, tailJsonl, visitHead, visitHeadSync } from '../../../src/storage/format/jsonl.js'
import type { JsonRecord, ReadItem } from '../../../src/storage/format/jsonl.js'
import { makeTree } from '../../fixtures/tree.js'

async function collect(path: string): Promise<ReadItem[]> {
  const items: ReadItem[] = []
  for await (const item of readJsonl(path)) items.push(item)
  return items
}

describe('JsonlAppender', () => {
  it('appends one line per record and reads them back in order', async () => {
    const file = join(makeTree().base, 'a.jsonl')
    const log = JsonlAppender.open(file)
    for (let i = 1; i <= 5; i++) log.append({ seq: i, text: 'x'.repeat(i) })
    log.close()
    expect(readFileSync(file, 'utf8').split('\n')).toHaveLength(6)
    const items = await collect(file)
    expect(items.map((i) => (i.ok ? i.record.seq : null))).toEqual([1, 2, 3, 4, 5])
  })

  it('cuts a torn tail back to the last newline when reopened', () => {
    const file = join(makeTree().base, 'a.jsonl')
    writeFileSync(file, '{"seq":1}\n{"seq":2}\n{"seq":3,"content":"half')
    const log = JsonlAppender.open(file)
    expect(log.repairedBytes).toBe('{"seq":3,"content":"half'.length)
    log.append({ seq: 3 })
    log.close()
    expect(readFileSync(file, 'utf8')).toBe('{"seq":1}\n{"seq":2}\n{"seq":3}\n')
  })

  it('writes a record larger than 512 KiB as one line', async () => {
    const file = join(makeTree().base, 'big.jsonl')
    const log = JsonlAppender.open(file)
    log.append({ seq: 1, content: 'y'.repeat(2 * 1024 * 1024) })
    log.close()
    const items = await collect(file)
    expect(items).toHaveLength(1)
    expect(items[0]?.ok && (items[0].record.content as string).length).toBe(2 * 1024 * 1024)
  })
})

describe('readJsonl', () => {
  it('reports invalid lines and a torn last line without failing', async () => {
    const file = join(makeTree().base, 'm.jsonl')
    writeFileSync(file, '{"seq":1}\nnot json\n\n[1,2]\n{"seq":2}\n{"seq":3')
    const items = await collect(file)
    expect(items.filter((i) => i.ok)).toHaveLength(2)
    expect(items.filter((i) => !i.ok).map((i) => (i.ok ? null : i.bad))).toEqual([
      { line: 2, reason: 'invalid' },
      { line: 4, reason: 'invalid' },
      { line: 6, reason: 'torn' },
    ])
  })

  it('reads <name>.gz transparently when the plain file is gone', async () => {
    const base = makeTree().base
    writeFileSync(join(base, 'm.jsonl.gz'), gzipSync('{"seq":1}\n{"seq":2}\n'))
    const items = await collect(join(base, 'm.jsonl'))
    expect(items.map((i) => (i.ok ? i.record.seq : null))).toEqual([1, 2])
  })

  it('treats a damaged archive as torn at the point of damage', async () => {
    const base = makeTree().base
    const gz = gzipSync(Array.from({ length: 2000 }, (_, i) => `{"seq":${i + 1}}\n`).join(''))
    writeFileSync(join(base, 'm.jsonl.gz'), gz.subarray(0, Math.floor(gz.length / 2)))
    const items = await collect(join(base, 'm.jsonl'))
    expect(items.at(-1)).toEqual({ ok: false, bad: expect.objectContaining({ reason: 'torn' }) })
  })

  it('yields nothing for a missing file', async () => {
    expect(await collect(join(makeTree().base, 'none.jsonl'))).toEqual([])
  })
})

describe('tailJsonl', () => {
  it('returns the last n records in file order, skipping a torn tail', async () => {
    const file = join(makeTree().base, 'm.jsonl')
    const lines = Array.from({ length: 1000 }, (_, i) => JSON.stringify({ seq: i + 1, pad: 'p'.repeat(i % 300) }))
    writeFileSync(file, `${lines.join('\n')}\n{"seq":1001,"torn`)
    const { records, bad } = await tailJsonl(file, 50)
    expect(records.map((r) => r.seq)).toEqual(Array.from({ length: 50 }, (_, i) => 951 + i))
    expect(bad).toEqual([{ line: 1, reason: 'torn' }])
  })

  it('handles records longer than its read blocks and the first line of the file', async () => {
    const file = join(makeTree().base, 'm.jsonl')
    writeFileSync(file, `${JSON.stringify({ seq: 1, c: 'a'.repeat(3_000_000) })}\n${JSON.stringify({ seq: 2 })}\n`)
    const { records } = await tailJsonl(file, 5)
    expect(records.map((r) => r.seq)).toEqual([1, 2])
    expect(lastRecordSync(file)?.seq).toBe(2)
  })

  it('reads two files one after the other through its one buffer, each whole', async () => {
    const base = makeTree().base
    const long = join(base, 'long.jsonl')
    const short = join(base, 'short.jsonl')
    const lines = Array.from({ length: 400 }, (_, i) => JSON.stringify({ seq: i + 1, pad: 'q'.repeat((i * 977) % 9000) }))
    writeFileSync(long, `${lines.join('\n')}\n`)
    writeFileSync(short, '{"seq":1}\n{"seq":2}\n')
    for (let round = 0; round < 2; round++) {
      expect((await tailJsonl(long, 1000)).records).toEqual(lines.map((l) => JSON.parse(l)))
      expect((await tailJsonl(short, 1000)).records.map((r) => r.seq)).toEqual([1, 2])
    }
  })

  it('tails a gzipped file by streaming', async () => {
    const base = makeTree().base
    writeFileSync(join(base, 'm.jsonl.gz'), gzipSync('{"seq":1}\n{"seq":2}\n{"seq":3}\n'))
    expect((await tailJsonl(join(base, 'm.jsonl'), 2)).records.map((r) => r.seq)).toEqual([2, 3])
  })
})

describe('visitHeadSync', () => {
  it('hands over the first records in order until told to stop, across long lines, skipping bad ones', () => {
    const file = join(makeTree().base, 'm.jsonl')
    const records = [{ seq: 1, c: 's'.repeat(200_000) }, { seq: 2 }, { seq: 3, c: 'ü✓'.repeat(50_000) }, { seq: 4 }, { seq: 5 }]
    const text = records.map((r) => JSON.stringify(r))
    writeFileSync(file, `${text[0]}\n${text[1]}\nnot json\n${text[2]}\n${text[3]}\n${text[4]}\n{"seq":6,"torn`)
    const seen: JsonRecord[] = []
    visitHeadSync(file, (r) => (seen.push(r), r.seq === 4))
    expect(seen).toEqual(records.slice(0, 4))
    const all: JsonRecord[] = []
    visitHeadSync(file, (r) => (all.push(r), false))
    expect(all).toEqual(records)
  })
})

describe('visitHead', () => {
  it('reads a plain log and an archived one alike, and nothing of a missing log or a link', async () => {
    const base = makeTree().base
    const text = '{"seq":1}\nnot json\n{"seq":2}\n{"seq":3}\n{"seq":4,"torn'
    writeFileSync(join(base, 'plain.jsonl'), text)
    writeFileSync(join(base, 'archived.jsonl.gz'), gzipSync(text))
    symlinkSync(join(base, 'plain.jsonl'), join(base, 'link.jsonl'))
    const upTo2 = async (name: string) => {
      const seen: unknown[] = []
      await visitHead(join(base, name), (r) => (seen.push(r.seq), r.seq === 2))
      return seen
    }
    expect(await upTo2('plain.jsonl')).toEqual([1, 2])
    expect(await upTo2('archived.jsonl')).toEqual([1, 2])
    expect(await upTo2('missing.jsonl')).toEqual([])
    // Readers never follow a link out of a task directory (resolveDataFile).
    expect(await upTo2('link.jsonl')).toEqual([])
    const all: unknown[] = []
    await visitHead(join(base, 'archived.jsonl'), (r) => (all.push(r.seq), false))
    expect(all).toEqual([1, 2, 3])
  })
})

describe('appendShared', () => {
  it('starts on a new line after a crashed writer left a fragment', async () => {
    const file = join(makeTree().base, 'audit.jsonl')
    appendShared(file, { n: 1 })
    appendFileSync(file, '{"n":2,"torn')
    appendShared(file, { n: 3 })
    const items = await collect(file)
    expect(items.filter((i) => i.ok).map((i) => (i.ok ? i.record.n : 0))).toEqual([1, 3])
    expect(items.filter((i) => !i.ok)).toHaveLength(1)
  })
})
