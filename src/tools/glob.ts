import { lstatSync } from 'node:fs'
import picomatch from 'picomatch'
import { defineTool, ok } from './schema.js'
import { walk } from './walk.js'
import { existingPath } from './workspace.js'

const MAX_RESULTS = 100

interface Args {
  pattern: string
  path?: string
}

export const glob = defineTool<Args>({
  name: 'glob',
  description: 'Find files by glob pattern (e.g. "**/*.ts", "src/**/test_*.py"; a pattern without / matches file names at any depth). Newest first, up to 100.',
  parameters: {
    type: 'object',
    properties: {
      pattern: { type: 'string', description: 'glob pattern' },
      path: { type: 'string', description: 'directory to search in, relative to the workspace (default: the workspace)' },
    },
    required: ['pattern'],
  },
  async run({ pattern, path }, ctx) {
    const base = existingPath(ctx.workspace, path ?? '.', 'directory')
    const matches = matcher(pattern)
    const found: { rel: string; mtime: number }[] = []
    for (const entry of walk(base.real)) {
      if (entry.kind !== 'file' && entry.kind !== 'link') continue
      if (!matches(entry.rel)) continue
      found.push({ rel: base.rel === '.' ? entry.rel : `${base.rel}/${entry.rel}`, mtime: lstatSync(entry.path).mtimeMs })
    }
    if (found.length === 0) return ok(`no files match ${pattern}${path ? ` in ${base.rel}` : ''}`)
    found.sort((a, b) => b.mtime - a.mtime || (a.rel < b.rel ? -1 : 1))
    const shown = found.slice(0, MAX_RESULTS).map((f) => f.rel)
    const more = found.length > MAX_RESULTS ? `\n(${found.length - MAX_RESULTS} more matches not shown; narrow the pattern)` : ''
    return ok(`${shown.join('\n')}${more}`)
  },
})

/** picomatch; a pattern without a slash matches the file name at any depth (as most models expect). */
export function matcher(pattern: string): (rel: string) => boolean {
  return picomatch(pattern, { dot: true, basename: !pattern.includes('/') })
}
