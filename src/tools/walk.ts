import { readdirSync } from 'node:fs'
import type { Dirent } from 'node:fs'
import { join } from 'node:path'

/** Directories no tool descends into: version control, dependencies, build output, caches. */
export const SKIPPED_DIRS = new Set(['.git', '.hg', '.svn', 'node_modules', 'dist', 'build', 'out', 'target', '.venv', 'venv', '__pycache__', '.next', '.nuxt', '.cache', 'coverage', '.tox', '.mypy_cache', '.pytest_cache', '.gradle', '.idea'])

export interface Entry {
  /** Absolute path. */
  path: string
  /** Relative to the walk's root, `/`-separated. */
  rel: string
  kind: 'file' | 'dir' | 'link' | 'other'
  depth: number
}

/**
 * Walks a directory tree depth-first in name order, without following links (a link
 * may lead out of the workspace) and without entering SKIPPED_DIRS. `maxDepth` 1 lists
 * only the root's entries. An unreadable directory is skipped.
 */
export function* walk(root: string, maxDepth = Number.POSITIVE_INFINITY): Generator<Entry> {
  const stack: { dir: string; rel: string; depth: number }[] = [{ dir: root, rel: '', depth: 1 }]
  while (stack.length > 0) {
    const { dir, rel, depth } = stack.pop() as { dir: string; rel: string; depth: number }
    let entries: Dirent[]
    try {
      entries = readdirSync(dir, { withFileTypes: true })
    } catch {
      continue
    }
    entries.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))
    const subdirs: { dir: string; rel: string; depth: number }[] = []
    for (const e of entries) {
      const entry: Entry = { path: join(dir, e.name), rel: rel ? `${rel}/${e.name}` : e.name, kind: e.isSymbolicLink() ? 'link' : e.isDirectory() ? 'dir' : e.isFile() ? 'file' : 'other', depth }
      yield entry
      if (entry.kind === 'dir' && depth < maxDepth && !SKIPPED_DIRS.has(e.name)) subdirs.push({ dir: entry.path, rel: entry.rel, depth: depth + 1 })
    }
    for (let i = subdirs.length - 1; i >= 0; i--) stack.push(subdirs[i] as { dir: string; rel: string; depth: number })
  }
}

/** True when the first bytes hold a NUL: treated as binary, never shown. */
export function looksBinary(head: Buffer): boolean {
  return head.includes(0)
}
