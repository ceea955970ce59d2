import { closeSync, fstatSync, readFileSync, readSync } from 'node:fs'
import type { RE2JS } from 're2js'
import { ToolError } from './errors.js'
import { compileRe2 } from './re2.js'
import { boundaryOf, openDir, openFileRead, openIn, walkFd, yielder } from './fd-walk.js'
import type { Boundary } from './fd-walk.js'
import { matcher } from './glob.js'
import { defineTool, ok, param } from './schema.js'
import { looksBinary, SKIPPED_DIRS } from './walk.js'
import { maskedHead } from '../storage/format/mask-stream.js'

const MAX_FILE = 2 * 1024 * 1024
const MAX_LINE = 500

export const grep = defineTool({
  name: 'grep',
  description:
    'Search file contents with a regular expression (RE2 syntax: like JavaScript, but no backreferences or lookaround). Results are "path:line: text", grouped by file. Skips binary files and files over 2 MB.',
  parameters: {
    pattern: param.text('regular expression (RE2 syntax, e.g. "foo\\(", "(?i)todo")'),
    path: param.optionalText('file or directory to search, relative to the workspace (default: the workspace)'),
    include: param.optionalText('only files matching this glob, e.g. "*.ts"'),
    limit: param.int('most matching lines to show', 100, 1, 1000),
  },
  async run({ pattern, path, include, limit }, ctx) {
    // RE2 (linear time): a model's pattern such as ^(a+)+$ cannot stall the process the way a backtracking engine does.
    let regex: RE2JS
    try {
      regex = await compileRe2(pattern)
    } catch (err) {
      throw new ToolError(`invalid regular expression ${JSON.stringify(pattern)} (RE2 syntax: no backreferences or lookaround): ${(err as Error).message}`)
    }
    const boundary = boundaryOf(ctx)
    const wanted = include ? await matcher(include) : () => true
    const groups: string[] = []
    let count = 0
    let filesWithMatches = 0
    let hitLimit = false
    const breathe = yielder()
    for (const file of filesUnder(boundary, path ?? '.', wanted)) {
      await breathe()
      if (ctx.signal.aborted) break
      const text = file.text
      if (text === null) continue
      const lines = text.split('\n')
      const hits: string[] = []
      for (let i = 0; i < lines.length; i++) {
        const line = (lines[i] ?? '').replace(/\r$/, '')
        if (!regex.matcher(line).find()) continue
        if (count >= limit) {
          hitLimit = true
          break
        }
        count++
        hits.push(`${file.rel}:${i + 1}: ${line.length > MAX_LINE ? `${maskedHead(line, MAX_LINE)}… [cut]` : line}`)
      }
      if (hits.length > 0) {
        filesWithMatches++
        groups.push(hits.join('\n'))
      }
      if (hitLimit) break
    }
    if (count === 0) return ok(`no matches for /${pattern}/${include ? ` in ${include} files` : ''}`)
    const plural = (n: number, word: string, suffix: string) => `${n} ${word}${n === 1 ? '' : suffix}`
    const footer = hitLimit
      ? `(limit of ${limit} matches reached; narrow the pattern, path or include, or raise limit)`
      : `(${plural(count, 'match', 'es')} in ${plural(filesWithMatches, 'file', 's')})`
    return ok(`${groups.join('\n\n')}\n${footer}`)
  },
})

/**
 * The texts to search: the one file given, or the regular files under a directory,
 * each opened from its held directory (links not followed, hidden places skipped).
 */
function* filesUnder(boundary: Boundary, path: string, wanted: (rel: string) => boolean): Generator<{ rel: string; text: string | null }> {
  let dir: ReturnType<typeof openDir>
  try {
    dir = openDir(boundary, path)
  } catch (err) {
    if (!(err instanceof ToolError) || !err.message.includes('not a directory')) throw err
    const file = openFileRead(boundary, path)
    yield { rel: file.rel, text: readText(file.fd) }
    return
  }
  try {
    for (const e of walkFd(boundary, dir.fd, SKIPPED_DIRS)) {
      if (e.kind !== 'file' || !wanted(e.rel)) continue
      const rel = dir.rel === '.' ? e.rel : `${dir.rel}/${e.rel}`
      let fd: number
      try {
        fd = openIn(boundary, e.dirFd, e.name, rel).fd
      } catch {
        continue
      }
      yield { rel, text: readText(fd) }
    }
  } finally {
    dir.close()
  }
}

/** A file's text, or null for a binary or too large one; closes the fd. */
function readText(fd: number): string | null {
  try {
    const size = fstatSync(fd).size
    if (size > MAX_FILE) return null
    const head = Buffer.alloc(Math.min(8192, size))
    readSync(fd, head, 0, head.length, 0)
    if (looksBinary(head)) return null
    return readFileSync(fd, 'utf8')
  } finally {
    closeSync(fd)
  }
}
