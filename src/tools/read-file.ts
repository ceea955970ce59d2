import { closeSync, fstatSync, openSync, readdirSync, readSync } from 'node:fs'
import { basename, dirname } from 'node:path'
import { StringDecoder } from 'node:string_decoder'
import { ToolError } from './errors.js'
import { defineTool, ok } from './schema.js'
import { looksBinary } from './walk.js'
import { existingPath, resolveInWorkspace } from './workspace.js'

export const MAX_LINE = 2000
export const MAX_OUTPUT = 50_000
const CHUNK = 64 * 1024

interface Args {
  path: string
  offset: number
  limit: number
}

export const readFile = defineTool<Args>({
  name: 'read_file',
  description: 'Read a text file of the workspace as numbered lines ("N: text"). Use offset and limit for long files; the footer says where to go on.',
  parameters: {
    type: 'object',
    properties: {
      path: { type: 'string', description: 'path relative to the workspace' },
      offset: { type: 'integer', minimum: 1, default: 1, description: 'first line to show (1-based)' },
      limit: { type: 'integer', minimum: 1, maximum: 2000, default: 2000, description: 'how many lines to show' },
    },
    required: ['path'],
  },
  async run({ path, offset, limit }, ctx) {
    const target = resolveInWorkspace(ctx.workspace, path)
    if (!target.exists) throw new ToolError(`${path} does not exist${suggest(target.real)}`)
    const file = existingPath(ctx.workspace, path, 'file')
    const fd = openSync(file.real, 'r')
    try {
      const stat = fstatSync(fd)
      const head = Buffer.alloc(Math.min(8192, stat.size))
      readSync(fd, head, 0, head.length, 0)
      if (looksBinary(head)) throw new ToolError(`${path} is a binary file (${stat.size.toLocaleString('en-US')} bytes); read_file shows text only`)
      ctx.reads.set(file.rel, { mtimeMs: stat.mtimeMs, size: stat.size })
      if (stat.size === 0) return ok(`(${file.rel} is empty)`)
      return ok(numberedLines(fd, offset, limit))
    } finally {
      closeSync(fd)
    }
  },
})

/** Lines offset..offset+limit-1, read in chunks: a huge file is never read whole. */
function numberedLines(fd: number, offset: number, limit: number): string {
  const out: string[] = []
  let bytes = 0
  let line = 1
  let pending = ''
  let position = 0
  let more = false
  const buf = Buffer.allocUnsafe(CHUNK)
  // A character split between two chunks is decoded whole.
  const decoder = new StringDecoder('utf8')
  const take = (text: string): boolean => {
    if (line >= offset) {
      const shown = text.length > MAX_LINE ? `${text.slice(0, MAX_LINE)}… [line cut at ${MAX_LINE} characters]` : text
      const entry = `${line}: ${shown}`
      if (out.length >= limit || bytes + entry.length > MAX_OUTPUT) {
        more = true
        return false
      }
      out.push(entry)
      bytes += entry.length + 1
    }
    line++
    return true
  }
  reading: for (;;) {
    const n = readSync(fd, buf, 0, CHUNK, position)
    if (n === 0) break
    position += n
    pending += decoder.write(buf.subarray(0, n))
    const lines = pending.split('\n')
    pending = lines.pop() ?? ''
    for (const text of lines) if (!take(text.replace(/\r$/, ''))) break reading
    // Skipping to a far offset must not hold a huge line in memory.
    if (line < offset && pending.length > MAX_LINE * 4) pending = pending.slice(-MAX_LINE * 4)
  }
  if (!more && pending !== '') take(pending)
  if (out.length === 0) return `(the file has ${line - 1} lines; offset ${offset} is past its end)`
  const first = offset
  const last = first + out.length - 1
  const footer = more ? `(lines ${first}-${last} shown; use offset=${last + 1} to read more)` : `(end of file, ${last} lines)`
  return `${out.join('\n')}\n${footer}`
}

/** Up to three names in the same directory that look like the missing one. */
function suggest(missing: string): string {
  let names: string[]
  try {
    names = readdirSync(dirname(missing))
  } catch {
    return ''
  }
  const want = basename(missing).toLowerCase()
  const scored = names
    .map((name) => ({ name, d: distance(want, name.toLowerCase()) }))
    .filter(({ name, d }) => d <= Math.max(2, Math.floor(want.length / 3)) || name.toLowerCase().includes(want) || want.includes(name.toLowerCase()))
    .sort((a, b) => a.d - b.d)
    .slice(0, 3)
  return scored.length ? `; did you mean ${scored.map((s) => s.name).join(', ')}?` : ''
}

function distance(a: string, b: string): number {
  if (Math.abs(a.length - b.length) > 8) return 99
  let prev = Array.from({ length: b.length + 1 }, (_, i) => i)
  for (let i = 1; i <= a.length; i++) {
    const row = [i]
    for (let j = 1; j <= b.length; j++) row[j] = Math.min((prev[j] as number) + 1, (row[j - 1] as number) + 1, (prev[j - 1] as number) + (a[i - 1] === b[j - 1] ? 0 : 1))
    prev = row
  }
  return prev[b.length] as number
}
