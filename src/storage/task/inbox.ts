import { closeSync, openSync, readSync, statSync } from 'node:fs'
import { join } from 'node:path'
import { isErrno, UsageError } from '../../errors.js'
import { appendShared } from '../format/jsonl.js'
import type { JsonRecord } from '../format/jsonl.js'
import { FILES } from '../fs/layout.js'
import { maskText } from '../format/mask.js'
import { grouped } from '../../text.js'
import { nodeCrypto } from '../../lazy-builtins.js'

export type ControlAction = 'pause' | 'compress' | 'end'

/** A line of inbox.jsonl (docs/contract.md §6, §12.6): a comment or chat message, a control request, or the owner's reply to one. */
export type InboxRecord =
  | { id: string; kind: 'message'; sender: string; content: string; created_at: string; visible?: boolean }
  | { id: string; kind: 'control'; action: ControlAction; sender: string; created_at: string }
  | { id: string; kind: 'reply'; request_id: string; action: ControlAction; ok: boolean; message: string; created_at: string }

type NewInboxRecord = InboxRecord extends infer R ? (R extends InboxRecord ? Omit<R, 'id' | 'created_at'> : never) : never

/**
 * Appends one record to a task's inbox.jsonl, masked, as one write (other processes
 * append too, and the owner reads concurrently). Returns the record as written.
 */
export function appendInbox(dir: string, record: NewInboxRecord, now = new Date()): InboxRecord {
  const full = { id: nodeCrypto().randomUUID(), created_at: now.toISOString(), ...record } as InboxRecord
  if (full.kind === 'message') full.content = maskText(full.content)
  if (full.kind === 'reply') full.message = maskText(full.message)
  // A line the reader cannot take whole would be skipped there: refused here instead, where the sender hears of it.
  const bytes = Buffer.byteLength(JSON.stringify(full), 'utf8') + 1
  if (bytes > CHUNK) {
    throw new UsageError(
      `the message is ${grouped(bytes)} bytes as an inbox line; a task's inbox takes at most ${grouped(CHUNK)} (1 MiB) per message, and nothing was queued`,
      'send a shorter message: put long text in a file in the workspace and name the file',
    )
  }
  appendShared(join(dir, FILES.inbox), full)
  return full
}

/** At most this much of the inbox is read per call, so a flood cannot blow up memory. */
const CHUNK = 1 << 20

/**
 * The complete lines of inbox.jsonl after byte `offset`, and the offset after the
 * last complete line: a line still being written is left for the next read. Lines
 * that are not inbox records are skipped (and counted), never fatal.
 */
export function readInbox(dir: string, offset: number): { records: InboxRecord[]; ends: number[]; offset: number; bad: number; tooLong: number } {
  const path = join(dir, FILES.inbox)
  // Every turn looks, and mostly finds no inbox or nothing new: a stat answers that
  // without opening the file (or throwing ENOENT). The file only grows.
  const size = statSync(path, { throwIfNoEntry: false })?.size
  if (size === undefined || size <= offset) return { records: [], ends: [], offset, bad: 0, tooLong: 0 }
  let fd: number
  try {
    fd = openSync(path, 'r')
  } catch (err) {
    if (isErrno(err, 'ENOENT')) return { records: [], ends: [], offset, bad: 0, tooLong: 0 }
    throw err
  }
  try {
    const records: InboxRecord[] = []
    // The byte offset just after each record: a reader that handles one at a time saves where it stands.
    const ends: number[] = []
    let bad = 0
    // Lines over a chunk (written by something other than appendInbox, which refuses them): counted apart, to be said so.
    let tooLong = 0
    let position = offset
    for (;;) {
      const buf = Buffer.allocUnsafe(CHUNK)
      const n = readSync(fd, buf, 0, CHUNK, position)
      if (n === 0) break
      const end = buf.lastIndexOf(0x0a, n - 1)
      if (end < 0) {
        // One line longer than a chunk: skip it whole once it is complete.
        const skipped = skipLongLine(fd, position + n)
        if (skipped === null) break
        tooLong++
        position = skipped
        continue
      }
      let start = 0
      while (start <= end) {
        const nl = buf.indexOf(0x0a, start)
        const line = buf.subarray(start, nl).toString('utf8')
        start = nl + 1
        if (line.trim() === '') continue
        const record = parseInboxLine(line)
        if (record) {
          records.push(record)
          ends.push(position + start)
        } else bad++
      }
      position += end + 1
      if (n < CHUNK) break
    }
    return { records, ends, offset: position, bad, tooLong }
  } finally {
    closeSync(fd)
  }
}

function skipLongLine(fd: number, from: number): number | null {
  const buf = Buffer.allocUnsafe(64 * 1024)
  for (let position = from; ; ) {
    const n = readSync(fd, buf, 0, buf.length, position)
    if (n === 0) return null
    const nl = buf.subarray(0, n).indexOf(0x0a)
    if (nl >= 0) return position + nl + 1
    position += n
  }
}

function parseInboxLine(line: string): InboxRecord | null {
  let raw: JsonRecord
  try {
    raw = JSON.parse(line) as JsonRecord
  } catch {
    return null
  }
  if (raw === null || typeof raw !== 'object' || typeof raw.id !== 'string') return null
  // Seed 004 messages carry no kind: {id, sender, content, created_at, visible}.
  const kind = raw.kind ?? 'message'
  if (kind === 'message' && typeof raw.content === 'string')
    return { ...raw, kind, sender: typeof raw.sender === 'string' ? raw.sender : 'unknown' } as InboxRecord
  if (kind === 'control' && (raw.action === 'pause' || raw.action === 'compress' || raw.action === 'end')) return raw as unknown as InboxRecord
  if (kind === 'reply' && typeof raw.request_id === 'string') return raw as unknown as InboxRecord
  return null
}
