// MessageStore.add (masking, token estimate, JSON, two appends) against raw writeSync
// of the same bytes to append descriptors, in the same run.
import { closeSync, openSync, readFileSync, writeSync } from 'node:fs'
import { join } from 'node:path'
import { MessageStore } from '../dist/storage/task/message-store.js'
import { agentText, remove, rng, scratch, timeInterleaved } from './lib.mjs'

const COUNT = 20_000

export async function run() {
  const random = rng(7)
  const inputs = Array.from({ length: COUNT }, (_, i) => ({
    role: i % 3 === 0 ? 'tool' : i % 2 ? 'assistant' : 'user',
    content: agentText(random, 300 + Math.floor(random() * 3800)) + (i % 50 === 0 ? ' contact ops@example.com' : ''),
  }))

  // The exact bytes the store writes, captured once, for the baseline.
  const probe = scratch('append-probe')
  const store = MessageStore.open(probe)
  for (const m of inputs) store.add(m)
  store.close()
  const messageLines = readFileSync(join(probe, 'messages.jsonl'))
    .toString()
    .split('\n')
    .slice(0, -1)
    .map((l) => Buffer.from(`${l}\n`))
  const currentLines = readFileSync(join(probe, 'current.jsonl'))
    .toString()
    .split('\n')
    .slice(0, -1)
    .map((l) => Buffer.from(`${l}\n`))
  remove(probe)

  const [ours, raw] = await timeInterleaved(
    [
      () => {
        const dir = scratch('append-store')
        const s = MessageStore.open(dir)
        for (const m of inputs) s.add(m)
        s.close()
        return () => remove(dir)
      },
      () => {
        const dir = scratch('append-raw')
        const a = openSync(join(dir, 'messages.jsonl'), 'a')
        const b = openSync(join(dir, 'current.jsonl'), 'a')
        for (let i = 0; i < messageLines.length; i++) {
          writeSync(a, messageLines[i])
          writeSync(b, currentLines[i])
        }
        closeSync(a)
        closeSync(b)
        return () => remove(dir)
      },
    ],
    7,
  )
  const ratio = raw / ours
  return [
    {
      name: 'append',
      what: `MessageStore.add of ${COUNT} messages (300 B–4 KB) vs raw writeSync of the same bytes`,
      measured: `${((ours / COUNT) * 1000).toFixed(1)} µs/message (raw ${((raw / COUNT) * 1000).toFixed(1)} µs)`,
      ratio: `throughput ratio ${ratio.toFixed(2)}`,
      target: 'ratio ≥ 0.3',
      pass: ratio >= 0.3,
    },
  ]
}
