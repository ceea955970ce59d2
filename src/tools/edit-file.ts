import { closeSync, readFileSync } from 'node:fs'
import { ToolError } from './errors.js'
import { boundaryOf, openIn, walkToFile } from './fd-walk.js'
import { checkFresh, writeInDir } from './file-write.js'
import { defineTool, ok, param } from './schema.js'
import type { OpenFile, Parent } from './fd-walk.js'
import type { ToolContext, ToolOutcome } from './types.js'
import { maskedHead } from '../storage/format/mask-stream.js'

/** Larger files are edited with run_command (sed, a script): holding them whole is not worth it. */
const MAX_EDIT = 10 * 1024 * 1024

export const editFile = defineTool({
  name: 'edit_file',
  description:
    'Replace exact text in a file you have read: old_string must occur exactly once (include surrounding lines to make it unique), or set replace_all. Copy old_string from the file itself, without the "N: " line prefixes of read_file.',
  parameters: {
    path: param.text('path relative to the workspace'),
    old_string: param.text('the exact text to replace'),
    new_string: param.text('the text to put in its place'),
    replace_all: param.flag('replace every occurrence', false),
  },
  async run({ path, old_string: given, new_string: givenNew, replace_all: all }, ctx) {
    if (given === '') throw new ToolError('old_string is empty; to create or replace a whole file use write_file')
    if (given === givenNew) throw new ToolError('old_string and new_string are the same; nothing would change')
    // Read and written through one held directory: no path is resolved twice.
    const boundary = boundaryOf(ctx)
    const parent = walkToFile(boundary, path)
    try {
      if (parent.name === '.') throw new ToolError(`${path} is a directory; use list_dir to see what is in it`)
      const opened = openIn(boundary, parent.dirFd, parent.name, path)
      let content: string
      try {
        checkFresh(ctx, opened.rel, opened.stat)
        if (opened.stat.size > MAX_EDIT) throw new ToolError(`${opened.rel} is over ${MAX_EDIT / 1024 / 1024} MB; edit_file does not edit files this large`)
        content = readFileSync(opened.fd, 'utf8')
      } finally {
        closeSync(opened.fd)
      }
      return edit(ctx, parent, opened, content, given, givenNew, all)
    } finally {
      parent.close()
    }
  },
})

/** The edit itself, on the content read through `parent`; written back through it. */
function edit(ctx: ToolContext, parent: Parent, file: OpenFile, content: string, given: string, givenNew: string, all: boolean): ToolOutcome {
  // read_file shows CRLF lines without their \r: a model's "\n" means the file's "\r\n".
  const crlf = content.includes('\r\n') && !given.includes('\r')
  const oldText = crlf ? given.replaceAll('\n', '\r\n') : given
  const newText = crlf ? givenNew.replaceAll('\n', '\r\n') : givenNew
  const count = content.split(oldText).length - 1
  if (count === 0) throw new ToolError(`old_string was not found in ${file.rel}${hint(content, oldText)}`)
  if (count > 1 && !all)
    throw new ToolError(`old_string occurs ${count} times in ${file.rel}; add surrounding lines to make it unique, or set replace_all: true`)
  const at = content.indexOf(oldText)
  // split/join, not String.replace: "$&" and "$1" in new_string must stay literal.
  const updated = all ? content.split(oldText).join(newText) : content.slice(0, at) + newText + content.slice(at + oldText.length)
  writeInDir(ctx, parent, file.rel, updated, file.stat)
  const replaced = all ? count : 1
  return ok(`edited ${file.rel}: ${replaced} replacement${replaced === 1 ? '' : 's'}\n${around(updated, at, newText.length)}`)
}

/**
 * Why old_string may not have matched: line-number prefixes copied from read_file,
 * white space, or else the line of the file nearest to its first line.
 */
function hint(content: string, oldText: string): string {
  if (/^\s*\d+: /m.test(oldText)) return '; it contains "N: " line-number prefixes from read_file, which are not part of the file'
  const squash = (s: string) => s.replace(/\s+/g, ' ').trim()
  if (squash(content).includes(squash(oldText))) return '; it matches if white space is ignored: copy the indentation and line breaks exactly'
  const near = nearestLine(content, oldText.split('\n').find((l) => l.trim() !== '') ?? '')
  return near
    ? `; the nearest line is ${near.n}: ${near.text.trim().slice(0, 200)} (read_file the file again and copy the text exactly)`
    : '; read_file the file again and copy the text exactly'
}

/** The line sharing the most words with `wanted` (a cheap similarity that needs no dependency). */
function nearestLine(content: string, wanted: string): { n: number; text: string } | null {
  const words = (s: string) => new Set(s.toLowerCase().match(/[\p{L}\p{N}_]+/gu) ?? [])
  const want = words(wanted)
  if (want.size === 0) return null
  let best: { n: number; text: string; score: number } | null = null
  const lines = content.split('\n')
  for (let i = 0; i < lines.length; i++) {
    const text = lines[i] ?? ''
    const have = words(text)
    let common = 0
    for (const w of want) if (have.has(w)) common++
    const score = common / Math.max(want.size, have.size)
    if (common > 0 && (best === null || score > best.score)) best = { n: i + 1, text, score }
  }
  return best
}

/** The changed lines with three lines around them, numbered as read_file numbers them. */
function around(content: string, at: number, length: number): string {
  const firstLine = content.slice(0, at).split('\n').length
  const lastLine = firstLine + content.slice(at, at + length).split('\n').length - 1
  const lines = content.split('\n')
  // As read_file counts them: a final line break does not start another line.
  if (content.endsWith('\n')) lines.pop()
  const from = Math.max(1, firstLine - 3)
  const to = Math.min(lines.length, lastLine + 3, firstLine + 40)
  const out: string[] = []
  for (let n = from; n <= to; n++) {
    const line = (lines[n - 1] ?? '').replace(/\r$/, '')
    out.push(`${n}: ${line.length > 500 ? `${maskedHead(line, 500)}… [cut]` : line}`)
  }
  return out.join('\n')
}
