import { closeSync, createReadStream, existsSync, fstatSync, fsyncSync, ftruncateSync, lstatSync, openSync, readSync } from 'node:fs'
import { isErrno } from '../../errors.js'
import { withAppendMutex } from '../fs/append-mutex.js'
import { openPrivate, writeAll, writeAllAt } from '../fs/files.js'
import { Scratch } from './scratch.js'
import { nodeZlib } from '../../lazy-builtins.js'

export type JsonRecord = Record<string, unknown>

export interface BadLine {
  /** 1-based line number (counted from the end for tail reads: 1 = last line). */
  line: number
  reason: 'torn' | 'invalid'
}

export type ReadItem = { ok: true; record: JsonRecord } | { ok: false; bad: BadLine }

const NEWLINE = 0x0a
const BLOCK = 64 * 1024
const TAIL_FIRST_BLOCK = 8 * 1024
const TAIL_MAX_BLOCK = 1024 * 1024

/**
 * The buffer every synchronous backwards read (tailPlainSync, lastNewlineEnd) reads into,
 * reused: a compaction reads the window's worth of messages.jsonl from the end, and
 * reopening a log looks for its last newline. Fresh buffers for each were garbage outside
 * the heap that outlived a scavenge and waited for a full GC, which V8 holds off until
 * 64 MB of such memory has piled up: a long task's peak RSS grew with its length
 * (docs/development.md#memory). Those reads are synchronous, so one buffer serves them
 * all; no Buffer that points into it leaves them.
 */
const readScratch = new Scratch(2 * TAIL_MAX_BLOCK)

/**
 * The file that holds a log's data: `<name>` or, for an archived task, `<name>.gz`.
 * When a crash left both (between the rename of the .gz and the unlink of the
 * original), the two are identical and the plain one is preferred.
 */
export function resolveDataFile(path: string): string | null {
  if (isRegularFile(path)) return path
  if (isRegularFile(`${path}.gz`)) return `${path}.gz`
  return null
}

/**
 * A regular file, not a link: readers never follow a link out of a task directory
 * (a task's files are always written in place), and a directory is not data.
 */
function isRegularFile(path: string): boolean {
  try {
    return lstatSync(path).isFile()
  } catch (err) {
    // Absent is "no such file"; a directory this user may not search is an error to report, not an empty task.
    if (isErrno(err, 'ENOENT') || isErrno(err, 'ENOTDIR')) return false
    throw err
  }
}

export function parseLine(text: string): JsonRecord | null {
  try {
    const value: unknown = JSON.parse(text)
    return value !== null && typeof value === 'object' && !Array.isArray(value) ? (value as JsonRecord) : null
  } catch {
    return null
  }
}

/**
 * An append-only JSON Lines file owned by one writer. Each record is serialized to
 * one Buffer and written with `write` on an O_APPEND descriptor (never buffered, never
 * fs.appendFile, which splits large data into several writes), so concurrent
 * appenders never interleave and a crash loses at most the record being written.
 */
export class JsonlAppender {
  private fd: number | null
  private readonly scratch = new Scratch()

  private constructor(
    readonly path: string,
    fd: number,
    private readonly fsync: boolean,
    /** Bytes cut from a torn tail when the file was opened. */
    readonly repairedBytes: number,
  ) {
    this.fd = fd
  }

  /** Opens (creating 0600) for append; by default cuts a torn tail back to the last newline. */
  static open(path: string, options: { fsync?: boolean; repair?: boolean } = {}): JsonlAppender {
    const fd = openPrivate(path, 'a+')
    let repaired = 0
    try {
      if (options.repair !== false) repaired = repairTornTail(fd)
    } catch (err) {
      closeSync(fd)
      throw err
    }
    return new JsonlAppender(path, fd, options.fsync === true, repaired)
  }

  append(record: object): void {
    this.appendSerialized(`${JSON.stringify(record)}\n`)
  }

  /** `line` must be one JSON document followed by exactly one newline. */
  appendSerialized(line: string): void {
    if (this.fd === null) throw new Error(`${this.path} is closed`)
    this.write(line)
  }

  /**
   * Appends `head + middle + tail` as one line, encoded into a reused buffer and written
   * with one write: for a large field serialised once that several lines share, without
   * joining the strings or allocating per record. `middle` may be UTF-8 already (a field
   * two lines share is encoded once).
   */
  appendSpliced(head: string, middle: string | Buffer, tail: string): void {
    if (this.fd === null) throw new Error(`${this.path} is closed`)
    // At most 3 UTF-8 bytes per UTF-16 unit: an upper bound without measuring.
    const size = 3 * (head.length + tail.length) + (typeof middle === 'string' ? 3 * middle.length : middle.length)
    const line = this.scratch.get(size)
    let at = line.write(head, 0)
    at += typeof middle === 'string' ? line.write(middle, at) : middle.copy(line, at)
    at += line.write(tail, at)
    this.write(line.subarray(0, at))
  }

  /**
   * One line, whole or not at all: a write that fails part way (a full disk) is cut
   * back to the previous newline, so the file stays a clean sequence of records and
   * the next append does not land after a fragment.
   */
  private write(line: Buffer | string): void {
    const fd = this.fd as number
    try {
      writeAll(fd, line)
      if (this.fsync) fsyncSync(fd)
    } catch (err) {
      try {
        repairTornTail(fd)
      } catch {
        // The error that matters is the write's; the next open cuts the tail anyway.
      }
      throw err
    }
  }

  close(): void {
    if (this.fd === null) return
    closeSync(this.fd)
    this.fd = null
  }
}

/**
 * Cuts a last line without its newline (a write torn by a crash) back to the
 * previous newline. Returns the number of bytes removed.
 */
export function repairTornTail(fd: number): number {
  const size = fstatSync(fd).size
  if (size === 0) return 0
  const keep = lastNewlineEnd(fd, size)
  if (keep === size) return 0
  ftruncateSync(fd, keep)
  return size - keep
}

/** The offset just past the last newline in the first `size` bytes of the file (0 if none). */
function lastNewlineEnd(fd: number, size: number): number {
  const buf = readScratch.get(BLOCK)
  let end = size
  while (end > 0) {
    const start = Math.max(0, end - BLOCK)
    const n = readSync(fd, buf, 0, end - start, start)
    const at = buf.subarray(0, n).lastIndexOf(NEWLINE)
    if (at >= 0) return start + at + 1
    end = start
  }
  return 0
}

/**
 * Streams the records of a JSON Lines file (or its .gz), in order. Lines that are not
 * a JSON object come out as `{ok: false}` with their line number; a last line with no
 * newline is reported as torn. A missing file yields nothing.
 */
export async function* readJsonl(path: string): AsyncGenerator<ReadItem> {
  const file = resolveDataFile(path)
  if (file === null) return
  const raw = createReadStream(file, { highWaterMark: BLOCK })
  const source: AsyncIterable<Buffer> = file.endsWith('.gz') ? raw.pipe(nodeZlib().createGunzip()) : raw
  let pending: Buffer[] = []
  let line = 0
  try {
    for await (const chunk of source) {
      let start = 0
      for (let at = chunk.indexOf(NEWLINE, start); at >= 0; at = chunk.indexOf(NEWLINE, start)) {
        const piece = chunk.subarray(start, at)
        const text = (pending.length > 0 ? Buffer.concat([...pending, piece]) : piece).toString('utf8')
        pending = []
        start = at + 1
        line++
        if (text.trim() === '') continue
        const record = parseLine(text)
        yield record === null ? { ok: false, bad: { line, reason: 'invalid' } } : { ok: true, record }
      }
      if (start < chunk.length) pending.push(chunk.subarray(start))
    }
  } catch (err) {
    // A damaged archive ends the stream early; what was read stands, the rest is torn.
    if (!isGzipDamage(err)) throw err
    yield { ok: false, bad: { line: line + 1, reason: 'torn' } }
    return
  } finally {
    raw.destroy()
  }
  if (pending.length > 0 && Buffer.concat(pending).toString('utf8').trim() !== '') {
    yield { ok: false, bad: { line: line + 1, reason: 'torn' } }
  }
}

/**
 * Reads the records of a plain (not gzipped) file from its start, in blocks into the reused
 * buffer, handing each valid one to `visit` until it answers true or the file ends: for the
 * first lines of messages.jsonl, which every compaction reads (readJsonl's stream took a
 * fresh 64 KB buffer each time). Invalid lines and a torn last line are skipped.
 */
export function visitHeadSync(file: string, visit: (record: JsonRecord) => boolean): void {
  const fd = openSync(file, 'r')
  try {
    let buffer = readScratch.get(BLOCK)
    // Bytes of a line not ended yet, at the start of `buffer`.
    let held = 0
    let pos = 0
    for (;;) {
      if (buffer.length - held < BLOCK) {
        // A long line (a large task statement): room for it and the next block, the line copied along.
        const bigger = readScratch.get(Math.max(held + BLOCK, 2 * held))
        if (bigger !== buffer) buffer.copy(bigger, 0, 0, held)
        buffer = bigger
      }
      const read = readSync(fd, buffer, held, BLOCK, pos)
      if (read === 0) return
      pos += read
      const end = held + read
      let start = 0
      for (let at = buffer.indexOf(NEWLINE, held); at >= 0 && at < end; at = buffer.indexOf(NEWLINE, start)) {
        const record = parseLine(buffer.toString('utf8', start, at))
        start = at + 1
        if (record !== null && visit(record)) return
      }
      buffer.copyWithin(0, start, end)
      held = end - start
    }
  } finally {
    closeSync(fd)
  }
}

/**
 * Hands the records of a log (`<name>` or its `.gz`) from its start to `visit` until it answers
 * true or the log ends; invalid and torn lines are skipped. A plain log is read without a stream
 * (visitHeadSync: a compaction and every row of `list` read the first lines), an archived one
 * is streamed through gunzip. A missing log visits nothing.
 */
export async function visitHead(path: string, visit: (record: JsonRecord) => boolean): Promise<void> {
  const file = resolveDataFile(path)
  if (file === null) return
  if (!file.endsWith('.gz')) return visitHeadSync(file, visit)
  for await (const item of readJsonl(path)) if (item.ok && visit(item.record)) return
}

function isGzipDamage(err: unknown): boolean {
  const code = (err as NodeJS.ErrnoException).code
  return code === 'Z_DATA_ERROR' || code === 'Z_BUF_ERROR' || code === 'Z_STREAM_ERROR'
}

export interface TailResult {
  records: JsonRecord[]
  bad: BadLine[]
}

/**
 * The last `n` records of a file, in file order, read backwards from the end in
 * blocks: the cost depends on the size of those records, not of the file. A `.gz`
 * cannot be read backwards and is streamed instead.
 */
export async function tailJsonl(path: string, n: number, keep: RecordFilter = () => true, stopAt?: RecordFilter): Promise<TailResult> {
  const file = resolveDataFile(path)
  if (file === null || n <= 0) return { records: [], bad: [] }
  if (file.endsWith('.gz')) return tailByStreaming(path, n, keep, stopAt)
  return tailPlainSync(file, n, keep, stopAt)
}

/** Which records a tail read counts towards its `n`. */
export type RecordFilter = (record: JsonRecord) => boolean

/** tailJsonl for a plain (not gzipped) file that exists, synchronously: for writers reopening their logs. */
export function tailPlainSync(file: string, n: number, keep: RecordFilter = () => true, stopAt?: RecordFilter): TailResult {
  const fd = openSync(file, 'r')
  try {
    const size = fstatSync(fd).size
    const found: JsonRecord[] = []
    const bad: BadLine[] = []
    const end = lastNewlineEnd(fd, size)
    if (end < size) bad.push({ line: 1, reason: 'torn' })
    let lineFromEnd = bad.length
    let carry: Buffer | null = null
    let pos = end
    // Start small (most tails are a few short lines) and grow for long records.
    let want = TAIL_FIRST_BLOCK
    let stopped = false
    const take = (bytes: Buffer, line: number) => {
      stopped = collect(bytes, line, found, bad, keep, stopAt)
    }
    while (pos > 0 && found.length < n && !stopped) {
      const start = Math.max(0, pos - want)
      want = Math.min(want * 2, TAIL_MAX_BLOCK)
      // The block read goes before what is left of the one after it (`carry`, at the start
      // of the buffer the last block was read into), in the reused buffer when it has room.
      const length = pos - start
      const carried = carry === null ? 0 : carry.length
      const buffer = readScratch.get(length + carried)
      if (carry !== null) {
        if (carry.buffer === buffer.buffer && carry.byteOffset === buffer.byteOffset) buffer.copyWithin(length, 0, carried)
        else carry.copy(buffer, length)
      }
      const read = readSync(fd, buffer, 0, length, start)
      // A file cut shorter meanwhile: what was read stands, joined to the carry as before.
      if (read < length && carry !== null) buffer.copyWithin(read, length, length + carried)
      const block = buffer.subarray(0, read + carried)
      // `block` ends just before a newline (or at the end of the data); split from the right.
      let lineEnd = block.length
      if (pos === end && block[lineEnd - 1] === NEWLINE) lineEnd--
      let at = block.lastIndexOf(NEWLINE, lineEnd - 1)
      while (at >= 0 && found.length < n && !stopped) {
        lineFromEnd++
        take(block.subarray(at + 1, lineEnd), lineFromEnd)
        lineEnd = at
        at = lineEnd > 0 ? block.lastIndexOf(NEWLINE, lineEnd - 1) : -1
      }
      carry = block.subarray(0, lineEnd)
      pos = start
      if (pos === 0 && found.length < n && !stopped && carry.length > 0) {
        lineFromEnd++
        take(carry, lineFromEnd)
      }
    }
    return { records: found.reverse(), bad }
  } finally {
    closeSync(fd)
  }
}

/** Adds one line's record; true when `stopAt` says the backwards read has gone far enough. */
function collect(bytes: Buffer, lineFromEnd: number, found: JsonRecord[], bad: BadLine[], keep: RecordFilter, stopAt?: RecordFilter): boolean {
  const text = bytes.toString('utf8')
  if (text.trim() === '') return false
  const record = parseLine(text)
  if (record === null) bad.push({ line: lineFromEnd, reason: 'invalid' })
  else if (stopAt?.(record)) return true
  else if (keep(record)) found.push(record)
  return false
}

async function tailByStreaming(path: string, n: number, keep: RecordFilter, stopAt?: RecordFilter): Promise<TailResult> {
  let ring: JsonRecord[] = []
  const bad: BadLine[] = []
  for await (const item of readJsonl(path)) {
    if (!item.ok) {
      bad.push(item.bad)
      continue
    }
    // Reading forwards, a record that would stop a backwards read discards all before it.
    if (stopAt?.(item.record)) {
      ring = []
      continue
    }
    if (!keep(item.record)) continue
    ring.push(item.record)
    if (ring.length > n) ring.shift()
  }
  return { records: ring, bad }
}

/** The last complete, valid record of a plain file (read from the end), or null. */
export function lastRecordSync(path: string): JsonRecord | null {
  if (!existsSync(path)) return null
  return tailPlainSync(path, 1).records[0] ?? null
}

/**
 * Appends one record to a file that several processes, maybe on several hosts, write
 * (audit.jsonl, inbox.jsonl). O_APPEND is not atomic over NFS (each client seeks to the
 * end it last saw), so the record is written under the file's append mutex at the size
 * read under it, through a descriptor opened after taking it (NFS's close-to-open
 * consistency makes that size current). No one may cut a torn tail here: if the file
 * does not end with a newline, the record starts with one, so a crashed writer's
 * fragment stays a bad line of its own instead of swallowing this record.
 */
export function appendShared(path: string, record: object): void {
  const line = `${JSON.stringify(record)}\n`
  withAppendMutex(path, () => {
    const fd = openPrivate(path, 'r+')
    try {
      const size = fstatSync(fd).size
      let lead = ''
      if (size > 0) {
        const last = Buffer.alloc(1)
        readSync(fd, last, 0, 1, size - 1)
        if (last[0] !== NEWLINE) lead = '\n'
      }
      writeAllAt(fd, Buffer.from(lead + line), size)
    } finally {
      closeSync(fd)
    }
  })
}
