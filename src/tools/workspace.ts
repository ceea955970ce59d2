import { realpathSync, statSync } from 'node:fs'
import { basename, dirname, isAbsolute, join, relative, resolve, sep } from 'node:path'
import { ToolError } from './errors.js'

export interface Resolved {
  /** The real absolute path (for a path that does not exist yet: its real parent joined with the rest). */
  real: string
  /** Workspace-relative, with `/` separators; `.` for the workspace itself. */
  rel: string
  exists: boolean
}

/**
 * Resolves a path given by the model inside the workspace, or refuses it. Relative
 * paths are taken from the workspace; an absolute path only if it lies inside it. The
 * path is resolved with realpath, symlinks included, so `..` and links that lead out
 * are refused; for a path that does not exist yet, its deepest existing ancestor is
 * resolved and must be inside.
 */
export function resolveInWorkspace(workspace: string, path: string): Resolved {
  if (typeof path !== 'string' || path.trim() === '') throw new ToolError('path is empty; give a path relative to the workspace')
  if (path.includes('\0')) throw new ToolError('path contains a NUL byte')
  const wanted = isAbsolute(path) ? resolve(path) : resolve(workspace, path)
  if (!inside(workspace, wanted)) throw outside(path)
  let existing = wanted
  const rest: string[] = []
  for (;;) {
    try {
      const real = realpathSync(existing)
      const full = rest.length ? join(real, ...rest.reverse()) : real
      if (!inside(workspace, full)) throw outside(path)
      return { real: full, rel: relPath(workspace, full), exists: rest.length === 0 }
    } catch (err) {
      if (err instanceof ToolError) throw err
      const code = (err as NodeJS.ErrnoException).code
      if (code !== 'ENOENT' && code !== 'ENOTDIR') throw new ToolError(`cannot resolve ${path}: ${code ?? (err as Error).message}`)
      const parent = dirname(existing)
      if (parent === existing) throw outside(path)
      rest.push(basename(existing))
      existing = parent
    }
  }
}

/** Like resolveInWorkspace, but the path must exist (and be a file when `file` is set). */
export function existingPath(workspace: string, path: string, kind?: 'file' | 'directory'): Resolved {
  const resolved = resolveInWorkspace(workspace, path)
  if (!resolved.exists) throw new ToolError(`${path} does not exist`)
  if (kind) {
    const isDir = statSync(resolved.real).isDirectory()
    if (kind === 'file' && isDir) throw new ToolError(`${path} is a directory; use list_dir to see what is in it`)
    if (kind === 'directory' && !isDir) throw new ToolError(`${path} is a file, not a directory`)
  }
  return resolved
}

export function relPath(workspace: string, real: string): string {
  const rel = relative(workspace, real)
  return rel === '' ? '.' : rel.split(sep).join('/')
}

function inside(workspace: string, path: string): boolean {
  const rel = relative(workspace, path)
  return rel === '' || (rel !== '..' && !rel.startsWith(`..${sep}`) && !isAbsolute(rel))
}

function outside(path: string): ToolError {
  return new ToolError(`${path} is outside the workspace; tools may only use paths inside it (relative paths, no .. out of it, no links that lead out)`)
}
