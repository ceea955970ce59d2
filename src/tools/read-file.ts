import { closeSync, readSync } from 'node:fs'
import { basename, dirname } from 'node:path'
import { StringDecoder } from 'node:string_decoder'
import { ToolError } from './errors.js'
import { defineTool, ok, param } from './schema.js'
import { looksBinary } from './walk.js'
import { boundaryOf, entriesOf, isHidden, openDir, openFileRead, pathOf } from './fd-walk.js'
import type { OpenFile } from './fd-walk.js'
import type { ToolContext } from './types.js'
import { grouped } from '../text.js'
import { maskedHead, maskOverlap } from '../storage/format/mask-stream.js'

const MAX_LINE = 2000
const MAX_OUTPUT = 50_000
/** A "line" longer than this is not text to page through: read_file stops there rather than scan on. */
const MAX_SCANNED_LINE = 16 * 1024 * 1024
const CHUNK = 64 * 1024

export const readFile = defineTool({
  name: 'read_file',
  description: 'Read a text file of the workspace as numbered lines ("N: text"). Use offset and limit for long files; the footer says where to go on.',
  parameters: {
    path: param.text('path relative to the workspace'),
    offset: param.int('first line to show (1-based)', 1),
    limit: param.int('how many lines to show (at most 2000)', 2000, 1, 2000),
  },
  async run({ path, offset, limit }, ctx) {
    let file: OpenFile
    try {
      file = openFileRead(boundaryOf(ctx), path)
    } catch (err) {
      if (err instanceof ToolError && err.message === `${path} does not exist`) throw new ToolError(`${err.message}${suggest(ctx, path)}`)
      throw err
    }
    const { fd, stat } = file
    try {
      const head = Buffer.alloc(Math.min(8192, stat.size))
      readSync(fd, head, 0, head.length, 0)
      if (looksBinary(head)) throw new ToolError(`${file.rel} is a binary file (${grouped(stat.size)} bytes); read_file shows text only`)
      ctx.reads.set(file.rel, { mtimeMs: stat.mtimeMs, size: stat.size })
      if (stat.size === 0) return ok(`(${file.rel} is empty)`)
      return ok(numberedLines(fd, offset, limit))
    } finally {
      closeSync(fd)
    }
  },
})

/**
 * Lines offset..offset+limit-1, read in chunks: it stops as soon as the page is full,
 * and holds at most MAX_LINE characters of any one line (and the masking overlap past
 * them), so a huge file (or a huge line) is never held in memory.
 */
function numberedLines(fd: number, offset: number, limit: number): string {
  const out: string[] = []
  let bytes = 0
  let lineNo = 1
  let current = ''
  let currentLength = 0
  let full = false
  let tooLong = false
  // Of a long line, enough beyond MAX_LINE to mask a secret that starts before the cut whole (mask-stream.ts).
  const held = MAX_LINE + maskOverlap()
  const emit = (): boolean => {
    if (lineNo >= offset) {
      let text = current
      let length = currentLength
      // CRLF files: the \r is not part of the line (when the whole line is held).
      if (length === text.length && text.endsWith('\r')) {
        text = text.slice(0, -1)
        length--
      }
      const shown = length > MAX_LINE ? `${maskedHead(text, MAX_LINE)}… [line cut: ${grouped(length)} characters]` : text
      const entry = `${lineNo}: ${shown}`
      const size = Buffer.byteLength(entry) + 1
      // Room is left for the footer, so the whole result stays within MAX_OUTPUT.
      if (out.length >= limit || bytes + size > MAX_OUTPUT - 200) return false
      out.push(entry)
      bytes += size
    }
    lineNo++
    current = ''
    currentLength = 0
    return true
  }
  const buf = Buffer.allocUnsafe(CHUNK)
  // A character split between two chunks is decoded whole.
  const decoder = new StringDecoder('utf8')
  let position = 0
  reading: for (;;) {
    const n = readSync(fd, buf, 0, CHUNK, position)
    if (n === 0) break
    position += n
    const text = decoder.write(buf.subarray(0, n))
    let start = 0
    for (;;) {
      const nl = text.indexOf('\n', start)
      const piece = text.slice(start, nl === -1 ? text.length : nl)
      if (current.length <= held) current += piece.slice(0, held + 1 - current.length)
      currentLength += piece.length
      if (nl === -1) break
      if (!emit()) {
        full = true
        break reading
      }
      start = nl + 1
    }
    if (currentLength > MAX_SCANNED_LINE) {
      tooLong = true
      break
    }
  }
  if (!full && (currentLength > 0 || tooLong)) full = !emit()
  const last = offset + out.length - 1
  const shown = out.length > 0 ? `${out.join('\n')}\n` : ''
  if (tooLong && !full) return `${shown}(line ${lineNo - 1} is over ${MAX_SCANNED_LINE / 1024 / 1024} MB long; read_file cannot page past it)`
  if (out.length === 0) return `(the file has ${lineNo - 1} lines; offset ${offset} is past its end)`
  return `${shown}${full ? `(lines ${offset}-${last} shown; use offset=${last + 1} to read more)` : `(end of file, ${last} line${last === 1 ? '' : 's'})`}`
}

/** Up to three names in the same directory that look like the missing one. */
function suggest(ctx: ToolContext, missing: string): string {
  let names: string[]
  try {
    const boundary = boundaryOf(ctx)
    const dir = openDir(boundary, dirname(missing))
    try {
      const here = pathOf(dir.fd)
      // Not even the names of hidden places (the task tree) are suggested.
      names = entriesOf(dir.fd)
        .map((e) => e.name)
        .filter((name) => !isHidden(boundary, `${here}/${name}`))
    } finally {
      dir.close()
    }
  } catch {
    return ''
  }
  const want = basename(missing).toLowerCase()
  const near = names
    .map((name) => ({ name, d: distance(want, name.toLowerCase()) }))
    .filter(({ name, d }) => d <= Math.max(2, Math.floor(want.length / 3)) || name.toLowerCase().includes(want) || want.includes(name.toLowerCase()))
    .sort((a, b) => a.d - b.d || (a.name < b.name ? -1 : 1))
    .slice(0, 3)
  return near.length > 0 ? `; did you mean ${near.map((s) => s.name).join(', ')}?` : ''
}

/** Levenshtein distance; names far apart in length are not compared at all. */
function distance(a: string, b: string): number {
  if (Math.abs(a.length - b.length) > 8) return 99
  let prev = Array.from({ length: b.length + 1 }, (_, i) => i)
  for (let i = 1; i <= a.length; i++) {
    const row = [i]
    for (let j = 1; j <= b.length; j++) row[j] = Math.min((prev[j] ?? 0) + 1, (row[j - 1] ?? 0) + 1, (prev[j - 1] ?? 0) + (a[i - 1] === b[j - 1] ? 0 : 1))
    prev = row
  }
  return prev[b.length] ?? 99
}
