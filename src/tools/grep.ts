import { closeSync, fstatSync, openSync, readFileSync, readSync, statSync } from 'node:fs'
import { ToolError } from './errors.js'
import { matcher } from './glob.js'
import { defineTool, ok } from './schema.js'
import { looksBinary, walk } from './walk.js'
import { existingPath } from './workspace.js'

const MAX_FILE = 2 * 1024 * 1024
const MAX_LINE = 500

interface Args {
  pattern: string
  path?: string
  include?: string
  limit: number
}

export const grep = defineTool<Args>({
  name: 'grep',
  description: 'Search file contents with a JavaScript regular expression. Results are "path:line: text", grouped by file. Skips binary files and files over 2 MB.',
  parameters: {
    type: 'object',
    properties: {
      pattern: { type: 'string', description: 'regular expression (JavaScript syntax)' },
      path: { type: 'string', description: 'file or directory to search, relative to the workspace (default: the workspace)' },
      include: { type: 'string', description: 'only files matching this glob, e.g. "*.ts"' },
      limit: { type: 'integer', minimum: 1, maximum: 1000, default: 100, description: 'most matching lines to show' },
    },
    required: ['pattern'],
  },
  async run({ pattern, path, include, limit }, ctx) {
    let regex: RegExp
    try {
      regex = new RegExp(pattern)
    } catch (err) {
      throw new ToolError(`invalid regular expression ${pattern}: ${(err as Error).message}`)
    }
    const base = existingPath(ctx.workspace, path ?? '.')
    const wanted = include ? matcher(include) : () => true
    const files = statSync(base.real).isDirectory()
      ? (function* () {
          for (const e of walk(base.real)) if (e.kind === 'file' && wanted(e.rel)) yield { path: e.path, rel: base.rel === '.' ? e.rel : `${base.rel}/${e.rel}` }
        })()
      : [{ path: base.real, rel: base.rel }]
    const groups: string[] = []
    let count = 0
    let filesWithMatches = 0
    let hitLimit = false
    for (const file of files) {
      if (ctx.signal.aborted) break
      const text = readText(file.path)
      if (text === null) continue
      const lines = text.split('\n')
      const hits: string[] = []
      for (let i = 0; i < lines.length; i++) {
        const line = lines[i] as string
        if (!regex.test(line)) continue
        if (count >= limit) {
          hitLimit = true
          break
        }
        count++
        hits.push(`${file.rel}:${i + 1}: ${line.length > MAX_LINE ? `${line.slice(0, MAX_LINE)}…` : line}`)
      }
      if (hits.length > 0) {
        filesWithMatches++
        groups.push(hits.join('\n'))
      }
      if (hitLimit) break
    }
    if (count === 0) return ok(`no matches for /${pattern}/${include ? ` in ${include} files` : ''}`)
    const footer = hitLimit ? `\n(limit of ${limit} matches reached; narrow the pattern, path or include)` : `\n(${count} match${count === 1 ? '' : 'es'} in ${filesWithMatches} file${filesWithMatches === 1 ? '' : 's'})`
    return ok(`${groups.join('\n\n')}${footer}`)
  },
})

/** A file's text, or null for a binary, unreadable or too large file. */
function readText(path: string): string | null {
  let fd: number
  try {
    fd = openSync(path, 'r')
  } catch {
    return null
  }
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
