// The last 50 records of a 1 GiB messages.jsonl: tail read vs a full streaming scan.
import { closeSync, openSync, statSync, writeSync } from 'node:fs'
import { join } from 'node:path'
import { readJsonl, tailJsonl } from '../dist/storage/format/jsonl.js'
import { agentText, remove, rng, scratch, timeMedian } from './lib.mjs'

const SIZE = 1024 ** 3

export async function run() {
  const dir = scratch('tail')
  const file = join(dir, 'messages.jsonl')
  const random = rng(3)
  const fd = openSync(file, 'w')
  const texts = Array.from({ length: 64 }, () => agentText(random, 300 + Math.floor(random() * 3700)))
  let written = 0
  let seq = 0
  const batch = []
  while (written < SIZE) {
    seq++
    const line = `${JSON.stringify({ seq, role: seq % 2 ? 'assistant' : 'tool', content: texts[seq % 64], timestamp: '2024-01-15T10:30:00.000Z', token_count: 500 })}\n`
    batch.push(line)
    written += Buffer.byteLength(line)
    if (batch.length === 1000) writeSync(fd, batch.splice(0).join(''))
  }
  if (batch.length) writeSync(fd, batch.join(''))
  closeSync(fd)
  try {
    const tail = await timeMedian(async () => {
      const { records } = await tailJsonl(file, 50)
      if (records.length !== 50 || records[49].seq !== seq) throw new Error('tail returned the wrong records')
    }, 21)
    const scan = await timeMedian(
      async () => {
        const last = []
        for await (const item of readJsonl(file)) {
          if (!item.ok) continue
          last.push(item.record)
          if (last.length > 50) last.shift()
        }
        if (last[49].seq !== seq) throw new Error('scan returned the wrong records')
      },
      3,
      false,
    )
    const ratio = scan / tail
    return [
      {
        name: 'tail',
        what: `last 50 records of a ${(statSync(file).size / 1024 ** 3).toFixed(2)} GiB messages.jsonl (${seq.toLocaleString('en')} lines) vs a full streaming scan`,
        measured: `${tail.toFixed(2)} ms (scan ${(scan / 1000).toFixed(1)} s)`,
        ratio: `${Math.round(ratio).toLocaleString('en')}× faster`,
        target: '≤ 10 ms and ≥ 200×',
        pass: tail <= 10 && ratio >= 200,
      },
    ]
  } finally {
    remove(dir)
  }
}
