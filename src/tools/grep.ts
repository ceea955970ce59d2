import { closeSync, constants, fstatSync, lstatSync, openSync, readFileSync, readSync } from 'node:fs'
import { ToolError } from './errors.js'
import { matcher } from './glob.js'
import { defineTool, ok, param } from './schema.js'
import { looksBinary, walk } from './walk.js'
import { resolveInWorkspace } from './workspace.js'

const MAX_FILE = 2 * 1024 * 1024
const MAX_LINE = 500

export const grep = defineTool({
  name: 'grep',
  description: 'Search file contents with a JavaScript regular expression. Results are "path:line: text", grouped by file. Skips binary files and files over 2 MB.',
  parameters: {
    pattern: param.text('regular expression (JavaScript syntax)'),
    path: param.optionalText('file or directory to search, relative to the workspace (default: the workspace)'),
    include: param.optionalText('only files matching this glob, e.g. "*.ts"'),
    limit: param.int('most matching lines to show', 100, 1, 1000),
  },
  async run({ pattern, path, include, limit }, ctx) {
    let regex: RegExp
    try {
      regex = new RegExp(pattern)
    } catch (err) {
      throw new ToolError(`invalid regular expression ${JSON.stringify(pattern)}: ${(err as Error).message}`)
    }
    const base = resolveInWorkspace(ctx.workspace, path ?? '.', { mustExist: true })
    const wanted = include ? matcher(include) : () => true
    const groups: string[] = []
    let count = 0
    let filesWithMatches = 0
    let hitLimit = false
    for (const file of filesUnder(base.real, base.rel, wanted)) {
      if (ctx.signal.aborted) break
      const text = readText(file.path)
      if (text === null) continue
      const lines = text.split('\n')
      const hits: string[] = []
      for (let i = 0; i < lines.length; i++) {
        const line = (lines[i] ?? '').replace(/\r$/, '')
        if (!regex.test(line)) continue
        if (count >= limit) {
          hitLimit = true
          break
        }
        count++
        hits.push(`${file.rel}:${i + 1}: ${line.length > MAX_LINE ? `${line.slice(0, MAX_LINE)}… [cut]` : line}`)
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

/** The files to search: the one file given, or the regular files under a directory (links not followed). */
function* filesUnder(real: string, rel: string, wanted: (rel: string) => boolean): Generator<{ path: string; rel: string }> {
  if (!lstatSync(real).isDirectory()) {
    yield { path: real, rel }
    return
  }
  for (const e of walk(real)) if (e.kind === 'file' && wanted(e.rel)) yield { path: e.path, rel: rel === '.' ? e.rel : `${rel}/${e.rel}` }
}

/** A file's text, or null for a binary, unreadable, too large or not regular file. */
function readText(path: string): string | null {
  let fd: number
  try {
    // O_NOFOLLOW: a file swapped for a link during the walk is skipped, not followed out.
    fd = openSync(path, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK)
  } catch {
    return null
  }
  try {
    const stat = fstatSync(fd)
    if (!stat.isFile() || stat.size > MAX_FILE) return null
    const head = Buffer.alloc(Math.min(8192, stat.size))
    readSync(fd, head, 0, head.length, 0)
    if (looksBinary(head)) return null
    return readFileSync(fd, 'utf8')
  } finally {
    closeSync(fd)
  }
}
