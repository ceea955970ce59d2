import { lstatSync, realpathSync } from 'node:fs'
import { basename, dirname, isAbsolute, join, relative, resolve, sep } from 'node:path'
import { ToolError } from './errors.js'

export interface Resolved {
  /** The real absolute path (for a path that does not exist yet: its real ancestor joined with the rest). */
  real: string
  /** Workspace-relative, with `/` separators; `.` for the workspace itself. */
  rel: string
  exists: boolean
}

export interface ResolveOptions {
  /** Refuse a path that does not exist (with "does not exist"). */
  mustExist?: boolean
  /** Refuse an existing path of the other kind; implies mustExist. */
  kind?: 'file' | 'directory'
}

/**
 * Resolves a path given by the model inside the workspace, or refuses it. Relative
 * paths are taken from the workspace; an absolute path only if it lies inside it. The
 * path is resolved with realpath, symlinks included, so `..` and links that lead out
 * are refused; for a path that does not exist yet, its deepest existing ancestor is
 * resolved and must be inside. `workspace` must itself be a real path.
 */
export function resolveInWorkspace(workspace: string, path: string, options: ResolveOptions = {}): Resolved {
  if (typeof path !== 'string' || path.trim() === '') throw new ToolError('path is empty; give a path relative to the workspace')
  if (path.includes('\0')) throw new ToolError('path contains a NUL byte')
  const wanted = isAbsolute(path) ? resolve(path) : resolve(workspace, path)
  // Checked before any file system access, so nothing outside is even stat'ed.
  if (!inside(workspace, wanted)) throw outside(path)
  const resolved = resolveReal(workspace, path, wanted)
  if ((options.mustExist || options.kind) && !resolved.exists) throw new ToolError(`${path} does not exist`)
  if (options.kind && resolved.exists) {
    const isDir = lstatSync(resolved.real).isDirectory()
    if (options.kind === 'file' && isDir) throw new ToolError(`${resolved.rel} is a directory; use list_dir to see what is in it`)
    if (options.kind === 'directory' && !isDir) throw new ToolError(`${resolved.rel} is a file, not a directory; use read_file to read it`)
  }
  return resolved
}

function resolveReal(workspace: string, path: string, wanted: string): Resolved {
  let existing = wanted
  const rest: string[] = []
  for (;;) {
    let real: string
    try {
      real = realpathSync(existing)
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code
      if (code !== 'ENOENT' && code !== 'ENOTDIR') throw new ToolError(`cannot resolve ${path}: ${code ?? (err as Error).message}`)
      // A dangling link: writing "through" it would create its target, wherever that is.
      if (isLink(existing)) throw new ToolError(`${path} goes through a symbolic link whose target does not exist; tools do not follow it`)
      const parent = dirname(existing)
      if (parent === existing) throw outside(path)
      rest.push(basename(existing))
      existing = parent
      continue
    }
    const full = rest.length > 0 ? join(real, ...rest.reverse()) : real
    if (!inside(workspace, full)) throw outside(path)
    return { real: full, rel: relPath(workspace, full), exists: rest.length === 0 }
  }
}

function isLink(path: string): boolean {
  try {
    return lstatSync(path).isSymbolicLink()
  } catch {
    return false
  }
}

/** `real` relative to the workspace, `/`-separated; `.` for the workspace itself. */
export function relPath(workspace: string, real: string): string {
  const rel = relative(workspace, real)
  return rel === '' ? '.' : rel.split(sep).join('/')
}

export function inside(workspace: string, path: string): boolean {
  const rel = relative(workspace, path)
  return rel === '' || (rel !== '..' && !rel.startsWith(`..${sep}`) && !isAbsolute(rel))
}

function outside(path: string): ToolError {
  return new ToolError(`${path} is outside the workspace; tools may only use paths inside it (relative paths, no .. out of it, no links that lead out)`)
}
