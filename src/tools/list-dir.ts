import { readdirSync } from 'node:fs'
import type { Dirent } from 'node:fs'
import { join } from 'node:path'
import { defineTool, ok } from './schema.js'
import { SKIPPED_DIRS } from './walk.js'
import { existingPath } from './workspace.js'

interface Args {
  path: string
  depth: number
  limit: number
}

export const listDir = defineTool<Args>({
  name: 'list_dir',
  description: 'List a directory of the workspace as a tree (directories end with /), skipping .git, node_modules, build output and caches.',
  parameters: {
    type: 'object',
    properties: {
      path: { type: 'string', default: '.', description: 'directory relative to the workspace' },
      depth: { type: 'integer', minimum: 1, maximum: 10, default: 2, description: 'how many levels to show' },
      limit: { type: 'integer', minimum: 1, maximum: 1000, default: 200, description: 'most entries to show' },
    },
  },
  async run({ path, depth, limit }, ctx) {
    const dir = existingPath(ctx.workspace, path, 'directory')
    const lines: string[] = []
    let omitted = 0
    const visit = (abs: string, level: number) => {
      let entries: Dirent[]
      try {
        entries = readdirSync(abs, { withFileTypes: true })
      } catch {
        return
      }
      // Directories first, then files, each by name.
      entries.sort((a, b) => Number(b.isDirectory()) - Number(a.isDirectory()) || (a.name < b.name ? -1 : 1))
      for (const e of entries) {
        if (lines.length >= limit) {
          omitted++
          continue
        }
        const indent = '  '.repeat(level - 1)
        const skipped = e.isDirectory() && SKIPPED_DIRS.has(e.name)
        const name = e.isSymbolicLink() ? `${e.name} (link)` : e.isDirectory() ? `${e.name}/${skipped ? ' (not listed)' : ''}` : e.name
        lines.push(`${indent}${name}`)
        if (e.isDirectory() && !skipped && level < depth) visit(join(abs, e.name), level + 1)
      }
    }
    visit(dir.real, 1)
    if (lines.length === 0) return ok(`${dir.rel}/ is empty`)
    const tail = omitted > 0 ? `\n(${omitted} more entries not shown; raise limit or list a subdirectory)` : ''
    return ok(`${dir.rel === '.' ? './' : `${dir.rel}/`}\n${lines.map((l) => `  ${l}`).join('\n')}${tail}`)
  },
})
