import { lstatSync } from 'node:fs'
import { at, boundaryOf, openDir, walkFd, yielder } from './fd-walk.js'
import { defineTool, ok, param } from './schema.js'
import { SKIPPED_DIRS } from './walk.js'
import { byCodeUnits } from '../text.js'

const MAX_RESULTS = 100

export const glob = defineTool({
  name: 'glob',
  description: 'Find files by glob pattern (e.g. "**/*.ts", "src/**/test_*.py"; a pattern without / matches file names at any depth). Newest first, up to 100.',
  parameters: {
    pattern: param.text('glob pattern, relative to path'),
    path: param.optionalText('directory to search in, relative to the workspace (default: the workspace)'),
  },
  async run({ pattern, path }, ctx) {
    const boundary = boundaryOf(ctx)
    const base = openDir(boundary, path ?? '.')
    const matches = await matcher(pattern)
    const found: { rel: string; mtime: number }[] = []
    try {
      const breathe = yielder()
      for (const entry of walkFd(boundary, base.fd, SKIPPED_DIRS)) {
        await breathe()
        if (ctx.signal.aborted) break
        // A link is listed by its own name and time; what it points to is never looked at.
        if ((entry.kind !== 'file' && entry.kind !== 'link') || !matches(entry.rel)) continue
        const mtime = mtimeOf(at(entry.dirFd, entry.name))
        if (mtime !== null) found.push({ rel: base.rel === '.' ? entry.rel : `${base.rel}/${entry.rel}`, mtime })
      }
    } finally {
      base.close()
    }
    if (found.length === 0) return ok(`no files match ${pattern}${path ? ` in ${base.rel}` : ''}`)
    found.sort((a, b) => b.mtime - a.mtime || byCodeUnits(a.rel, b.rel))
    const shown = found.slice(0, MAX_RESULTS).map((f) => f.rel)
    const more = found.length > MAX_RESULTS ? `\n(${found.length - MAX_RESULTS} more matches not shown; narrow the pattern or the path)` : ''
    return ok(`${shown.join('\n')}${more}`)
  },
})

/** null when the file went away since the walk saw it. */
function mtimeOf(path: string): number | null {
  try {
    return lstatSync(path).mtimeMs
  } catch {
    return null
  }
}

/**
 * picomatch over walk-relative paths. A pattern without a slash matches the file name
 * at any depth (as most models expect), and a leading "./" is ignored. picomatch is
 * imported at the first glob, not at a run's start (docs/development.md#start-up).
 */
export async function matcher(pattern: string): Promise<(rel: string) => boolean> {
  const { default: picomatch } = await import('picomatch')
  const clean = pattern.replace(/^(\.\/)+/, '')
  return picomatch(clean, { dot: true, basename: !clean.includes('/') })
}
