import { createHash } from 'node:crypto'
import { closeSync, constants, existsSync, lstatSync, mkdirSync, openSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { gunzipSync } from 'node:zlib'
import { isErrno } from '../../errors.js'
import { writeFileAtomic } from '../fs/files.js'
import { BLOB_DIR } from '../fs/layout.js'
export { blobFiles } from '../fs/layout.js'
import { maskText } from '../format/mask.js'
import { grouped } from '../../text.js'

export { BLOB_DIR }

/** A blob id: the hex SHA-256 of its content; nothing else (no path, no dots) is ever looked up. */
const BLOB_ID = /^[0-9a-f]{64}$/
/** A stored message or request text that starts with a blob reference, and its id. */
const LEADING_REF = /^\[blob:([0-9a-f]{64})\]/
/** How much of a blob's text its stored message carries, so that jq readers (and summaries) see what it was. */
export const HEAD_BYTES = 400

export interface BlobSettings {
  /** Outputs longer than this (UTF-8 bytes) go to a blob (context.blobs.threshold_bytes). */
  thresholdBytes: number
  /** A fresh output longer than this is sent as head + tail + reference (context.blobs.max_inline_bytes). */
  maxInlineBytes: number
}

export const DEFAULT_BLOB_SETTINGS: BlobSettings = { thresholdBytes: 8 * 1024, maxInlineBytes: 64 * 1024 }

export function isBlobId(id: string): boolean {
  return BLOB_ID.test(id)
}

/** The blob id a text (a stored tool result, a request's) starts with, or null. */
export function leadingBlobId(text: string): string | null {
  return LEADING_REF.exec(text)?.[1] ?? null
}

/**
 * A tool's output as it is recorded (messages.jsonl, current.jsonl, tools.jsonl): masked,
 * and when longer than the threshold, stored once in `blobs/` (before the message that
 * refers to it is written, so that no reference ever dangles) and replaced by its
 * reference, its size and its head. Identical outputs are one blob.
 */
export function recordToolOutput(taskDir: string, output: string, settings: BlobSettings, note = ''): string {
  const masked = maskText(output)
  const size = Buffer.byteLength(masked)
  if (size <= settings.thresholdBytes) return maskText(`${output}${note}`)
  const id = writeBlob(taskDir, masked)
  // A note of the agent's (a loop warning) follows the reference, outside the blob: the same output is the same blob.
  return `${blobReference(id, size, masked)}${maskText(note)}`
}

/** Writes `text` (already masked) as a blob, atomically and 0600, unless it is there already. Returns its id. */
export function writeBlob(taskDir: string, text: string): string {
  const data = Buffer.from(text)
  const id = createHash('sha256').update(data).digest('hex')
  const dir = join(taskDir, BLOB_DIR)
  const path = join(dir, id)
  mkdirSync(dir, { recursive: true, mode: 0o700 })
  // A link in its place would lead the write out of the task directory.
  if (!lstatSync(dir).isDirectory()) throw new Error(`${dir} is not a directory (a link or a file is in its place); move it away`)
  // A cleanup gzips blobs with the task; either form is the same content.
  if (existsSync(path) || existsSync(`${path}.gz`)) return id
  writeFileAtomic(path, data)
  return id
}

/** The stored form of a blob's output: `[blob:<id>] (<size> bytes ...)` and its first HEAD_BYTES bytes. */
export function blobReference(id: string, size: number, text: string): string {
  const head = headOf(text, HEAD_BYTES)
  const more = head.length < text.length ? '\n[…]' : ''
  return `[blob:${id}] (${grouped(size)} bytes; the inspect tool reads it all)\n${head}${more}`
}

/** A blob's text, plain or gzipped by cleanup; null when the task has no such blob. Throws on a malformed id. */
export function readBlob(taskDir: string, id: string): string | null {
  if (!isBlobId(id)) throw new Error(`blob id ${JSON.stringify(id.slice(0, 80))} is not a blob id (64 hex digits)`)
  const dir = join(taskDir, BLOB_DIR)
  try {
    // Never through a link (the directory or the file): only the task's own blobs are read.
    if (!lstatSync(dir).isDirectory()) return null
  } catch (err) {
    if (isErrno(err, 'ENOENT')) return null
    throw err
  }
  const plain = readNoFollow(join(dir, id))
  if (plain !== null) return plain.toString('utf8')
  const gzipped = readNoFollow(join(dir, `${id}.gz`))
  return gzipped === null ? null : gunzipSync(gzipped).toString('utf8')
}

/** A regular file's bytes, opened without following a link; null when it does not exist. */
function readNoFollow(path: string): Buffer | null {
  let fd: number
  try {
    fd = openSync(path, constants.O_RDONLY | constants.O_NOFOLLOW)
  } catch (err) {
    if (isErrno(err, 'ENOENT')) return null
    if (isErrno(err, 'ELOOP')) throw new Error(`${path} is a symbolic link, not a blob; move it away`)
    throw err
  }
  try {
    return readFileSync(fd)
  } finally {
    closeSync(fd)
  }
}

/**
 * A stored tool result as a request sends it while it is fresh (not pruned): the
 * reference, then the whole output, so that the model loses nothing; an output over
 * `maxInlineBytes` goes as head + tail + reference. The same bytes every turn (the blob
 * never changes), so the provider's prefix cache holds. A text without a reference, or
 * whose blob is missing, is sent as stored.
 */
export function expandedOutput(taskDir: string, stored: string, maxInlineBytes: number): string {
  const id = leadingBlobId(stored)
  if (id === null) return stored
  const text = readBlob(taskDir, id)
  if (text === null) return stored
  const size = Buffer.byteLength(text)
  // What the stored message carries after the reference and head (a note), sent after the text.
  const reference = blobReference(id, size, text)
  const note = stored.startsWith(reference) ? stored.slice(reference.length) : ''
  if (size <= maxInlineBytes) return `[blob:${id}] ${text}${note}`
  const half = Math.floor(maxInlineBytes / 2)
  const head = headOf(text, half)
  const tail = tailOf(text, half)
  const cut = size - Buffer.byteLength(head) - Buffer.byteLength(tail)
  return `[blob:${id}] ${head}\n[… ${grouped(cut)} bytes not sent; inspect blob ${id} with offset/limit or grep to read them …]\n${tail}${note}`
}

/**
 * A record (a message, a tools.jsonl line) with its blob reference replaced by the whole
 * text, `[blob:<id>] ` first, for `view --full` and `export`: `content` and `result`;
 * a missing blob leaves the reference as it is.
 */
export function withBlobText<T extends Record<string, unknown>>(taskDir: string, record: T): T {
  let out = record
  for (const key of ['content', 'result'] as const) {
    const value = out[key]
    if (typeof value !== 'string' || leadingBlobId(value) === null) continue
    const whole = expandedOutput(taskDir, value, Number.POSITIVE_INFINITY)
    if (whole !== value) out = { ...out, [key]: whole }
  }
  return out
}

/** The first `bytes` UTF-8 bytes of `text` at most, never splitting a character. */
function headOf(text: string, bytes: number): string {
  if (text.length <= bytes / 3) return text
  return Buffer.from(text)
    .subarray(0, bytes)
    .toString('utf8')
    .replace(/\uFFFD+$/, '')
}

function tailOf(text: string, bytes: number): string {
  const data = Buffer.from(text)
  if (data.length <= bytes) return text
  return data
    .subarray(data.length - bytes)
    .toString('utf8')
    .replace(/^\uFFFD+/, '')
}
