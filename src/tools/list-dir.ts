import { closeSync } from 'node:fs'
import type { Dirent } from 'node:fs'
import { boundaryOf, entriesOf, isHidden, openDir, openSub, pathOf } from './fd-walk.js'
import { defineTool, ok, param } from './schema.js'
import { SKIPPED_DIRS } from './walk.js'
import { grouped } from '../text.js'
import { byCodeUnits } from '../text.js'

/** Past the limit, entries are still counted (to say how many were left out), up to this many. */
const MAX_COUNTED = 10_000

export const listDir = defineTool({
  name: 'list_dir',
  description: 'List a directory of the workspace as an indented tree (directories end with /), skipping .git, node_modules, build output and caches.',
  parameters: {
    path: param.textWithDefault('directory relative to the workspace', '.'),
    depth: param.int('how many levels to show', 2, 1, 10),
    limit: param.int('most entries to show', 200, 1, 1000),
  },
  async run({ path, depth, limit }, ctx) {
    const boundary = boundaryOf(ctx)
    const dir = openDir(boundary, path)
    const lines: string[] = []
    let omitted = 0
    // Each directory is read through its held fd and entered with O_NOFOLLOW: a swap for a link is never followed.
    const visit = (fd: number, level: number): void => {
      let entries: Dirent[]
      try {
        const here = pathOf(fd)
        entries = entriesOf(fd).filter((e) => !isHidden(boundary, `${here}/${e.name}`))
      } catch {
        return
      }
      // Directories first, then files, each by name.
      entries.sort((a, b) => Number(b.isDirectory()) - Number(a.isDirectory()) || byCodeUnits(a.name, b.name))
      for (const e of entries) {
        if (omitted >= MAX_COUNTED || ctx.signal.aborted) return
        const skipped = e.isDirectory() && SKIPPED_DIRS.has(e.name)
        if (lines.length < limit) lines.push(`${'  '.repeat(level)}${label(e, skipped)}`)
        else omitted++
        // Links are shown, never followed: one may lead out of the workspace.
        if (e.isDirectory() && !skipped && level < depth) {
          const sub = openSub(boundary, fd, e.name)
          if (sub === null) continue
          try {
            visit(sub, level + 1)
          } finally {
            closeSync(sub)
          }
        }
      }
    }
    try {
      visit(dir.fd, 1)
    } finally {
      dir.close()
    }
    if (lines.length === 0) return ok(`${dir.rel}/ is empty`)
    const more = omitted >= MAX_COUNTED ? `more than ${grouped(MAX_COUNTED)}` : grouped(omitted)
    const tail = omitted > 0 ? `\n(${more} more entries not shown; raise limit, lower depth or list a subdirectory)` : ''
    return ok(`${dir.rel === '.' ? './' : `${dir.rel}/`}\n${lines.join('\n')}${tail}`)
  },
})

function label(e: Dirent, skipped: boolean): string {
  if (e.isSymbolicLink()) return `${e.name} (link)`
  if (e.isDirectory()) return `${e.name}/${skipped ? ' (not listed)' : ''}`
  return e.name
}
