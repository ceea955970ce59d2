import { closeSync, constants, fstatSync, mkdirSync, openSync, readdirSync, readlinkSync } from 'node:fs'
import type { Dirent, Stats } from 'node:fs'
import { dirname, isAbsolute, relative, sep } from 'node:path'
import { ToolError } from './errors.js'
import { ownPathLikeDir } from './owner.js'
import type { ToolContext } from './types.js'
import { inside, realPathOf } from './workspace.js'
import { byCodeUnits } from '../text.js'

/*
 * Race-free paths inside the workspace, without openat(): every step opens ONE name
 * relative to a directory fd already held, addressed through the /proc/self/fd/<fd>
 * magic link (the kernel resolves it to the open directory itself, not to a path), with
 * O_NOFOLLOW. A directory swapped for a symlink after a check cannot redirect an open:
 * there is no check-then-use window. Measured on 2 cores (a swapper
 * racing the walk, test/helpers/link-swapper.mjs): the realpath-then-open it replaces leaked outside content in 0–95 of 3,000 tries; this
 * walk in 0 of 10,000, 7 runs.
 */

// O_CLOEXEC is missing from Node's typings but is Linux's 0o2000000: no fd leaks into a spawned command.
const CLOEXEC = 0o2000000
const DIR_FLAGS = constants.O_RDONLY | constants.O_DIRECTORY | constants.O_NOFOLLOW | CLOEXEC
/** O_NONBLOCK: opening a FIFO must not wait for a writer; fstat then refuses it. */
const FILE_FLAGS = constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK | CLOEXEC
const MAX_LINKS = 40

/** A name inside a held directory, for any path-taking call. */
export const at = (dirFd: number, name: string): string => `/proc/self/fd/${dirFd}/${name}`

/** Where a held fd is now: the kernel's own path of the open object. */
export const pathOf = (fd: number): string => readlinkSync(`/proc/self/fd/${fd}`)

/** The workspace and the places no tool may reach (task trees, config files), as real paths. */
export interface Boundary {
  workspace: string
  hidden: readonly string[]
}

/**
 * The hidden places are resolved again for each tool call: one that does not exist yet
 * (~/.config/ctxagent/config.yaml when the workspace is $HOME) is refused where it would
 * really be made, even after a link was put on the way to it.
 */
export function boundaryOf(ctx: ToolContext): Boundary {
  return { workspace: ctx.workspace, hidden: ctx.hidden.map(realPathOf) }
}

function outside(path: string): ToolError {
  return new ToolError(`${path} is outside the workspace; tools may only use paths inside it (relative paths, no .. out of it, no links that lead out)`)
}

function hiddenError(path: string): ToolError {
  return new ToolError(`${path} is inside ctxagent's task tree or config; tools never read or write there`)
}

/** True when a real path is, or is under, one of the hidden places. */
export function isHidden(boundary: Boundary, real: string): boolean {
  return boundary.hidden.some((h) => inside(h, real))
}

function components(workspace: string, path: string): string[] {
  let rel = path
  if (isAbsolute(path)) {
    rel = relative(workspace, path)
    if (rel === '..' || rel.startsWith(`..${sep}`) || isAbsolute(rel)) throw outside(path)
  }
  return rel.split('/').filter((c) => c !== '' && c !== '.')
}

/** The parent directory of a path, held open, and the last name; `close()` releases every fd. */
export interface Parent {
  dirFd: number
  name: string
  close(): void
}

/**
 * Walks every component but the last from the workspace's fd. `..` pops a held fd (never
 * above the workspace). A symlink in the middle is followed by hand: a relative target is
 * walked from the current directory, an absolute one only when it names a place inside
 * the workspace; so links inside keep working and links out are refused. With `create`,
 * missing directories are made (then opened with O_NOFOLLOW, so a link swapped in is refused).
 */
export function walkParent(boundary: Boundary, path: string, create = false): Parent {
  if (typeof path !== 'string' || path.trim() === '') throw new ToolError('path is empty; give a path relative to the workspace')
  if (path.includes('\0')) throw new ToolError('path contains a NUL byte')
  const pending = components(boundary.workspace, path)
  const root = openSync(boundary.workspace, DIR_FLAGS)
  const stack = [root]
  const close = () => {
    for (const fd of stack.splice(0)) closeSync(fd)
  }
  let links = 0
  try {
    if (pending.length === 0) pending.push('.')
    while (pending.length > 1) {
      const name = pending.shift() as string
      if (name === '..') {
        if (stack.length === 1) throw outside(path)
        closeSync(stack.pop() as number)
        continue
      }
      const cur = stack[stack.length - 1] as number
      let fd: number
      try {
        fd = openSync(at(cur, name), DIR_FLAGS)
      } catch (err) {
        const code = (err as NodeJS.ErrnoException).code
        if (code === 'ELOOP' || code === 'ENOTDIR') {
          let target: string
          try {
            target = readlinkSync(at(cur, name))
          } catch {
            throw new ToolError(`${path}: ${name} is not a directory`)
          }
          if (++links > MAX_LINKS) throw new ToolError(`${path}: too many symbolic links`)
          if (isAbsolute(target)) {
            pending.unshift(...components(boundary.workspace, target))
            while (stack.length > 1) closeSync(stack.pop() as number)
          } else {
            pending.unshift(...target.split('/').filter((c) => c !== '' && c !== '.'))
          }
          continue
        }
        if (code === 'ENOENT' && create) {
          if (isHidden(boundary, `${pathOf(cur)}/${name}`)) throw hiddenError(path)
          try {
            mkdirSync(at(cur, name))
            ownPathLikeDir(at(cur, name), cur)
          } catch (e) {
            if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e
          }
          pending.unshift(name)
          continue
        }
        // A hidden place that does not exist yet is refused as one that does: not even its absence is told.
        if (code === 'ENOENT' && isHidden(boundary, `${pathOf(cur)}/${name}`)) throw hiddenError(path)
        if (code === 'ENOENT') throw new ToolError(`${path} does not exist`)
        throw new ToolError(`cannot open ${path}: ${code ?? (err as Error).message}`)
      }
      stack.push(fd)
      if (isHidden(boundary, pathOf(fd))) throw hiddenError(path)
    }
    const name = pending[0] as string
    if (name === '..') {
      if (stack.length === 1) throw outside(path)
      closeSync(stack.pop() as number)
      return finish(boundary, path, stack, '.', close)
    }
    return finish(boundary, path, stack, name, close)
  } catch (err) {
    close()
    throw err
  }
}

function finish(boundary: Boundary, path: string, stack: number[], name: string, close: () => void): Parent {
  const dirFd = stack[stack.length - 1] as number
  const dir = pathOf(dirFd)
  // The held directory is where the kernel says it is: outside or hidden means refused, whatever the path said.
  if (!inside(boundary.workspace, dir)) throw outside(path)
  if (isHidden(boundary, name === '.' ? dir : `${dir}/${name}`)) throw hiddenError(path)
  return { dirFd, name, close }
}

/** Workspace-relative `/` path of a name in a held directory; `.` for the workspace. */
export function relOf(boundary: Boundary, dirFd: number, name: string): string {
  const rel = relative(boundary.workspace, name === '.' ? pathOf(dirFd) : `${pathOf(dirFd)}/${name}`)
  return rel === '' ? '.' : rel.split(sep).join('/')
}

export interface OpenFile {
  fd: number
  stat: Stats
  rel: string
}

/**
 * Opens a regular file for reading, or refuses it: links are not followed at the last
 * step, a FIFO or device is refused without blocking, and a file with more than one
 * hard link is refused (one of its names may be outside the workspace).
 */
export function openFileRead(boundary: Boundary, path: string, shown = path, links = 0): OpenFile {
  const parent = walkParent(boundary, path)
  try {
    if (parent.name === '.') throw new ToolError(`${shown} is a directory; use list_dir to see what is in it`)
    if (links < MAX_LINKS && isLink(parent)) return openFileRead(boundary, followLast(parent, path), shown, links + 1)
    return openIn(boundary, parent.dirFd, parent.name, shown)
  } finally {
    parent.close()
  }
}

/**
 * walkParent for a file to change: a link at the last step is followed by hand (its
 * target walked again from the workspace, so checked again), so that writing through
 * a link inside the workspace changes the file it names. A link swapped in after this
 * is replaced by the write's rename, never followed.
 */
export function walkToFile(boundary: Boundary, path: string, create = false): Parent {
  let current = path
  for (let links = 0; ; links++) {
    const parent = walkParent(boundary, current, create)
    if (parent.name === '.' || links >= MAX_LINKS || !isLink(parent)) return parent
    try {
      current = followLast(parent, current)
    } finally {
      parent.close()
    }
  }
}

function isLink(parent: Parent): boolean {
  try {
    readlinkSync(at(parent.dirFd, parent.name))
    return true
  } catch {
    return false
  }
}

/** openFileRead for one name of a held directory (the walks of grep and glob). */
export function openIn(boundary: Boundary, dirFd: number, name: string, shown: string): OpenFile {
  let fd: number
  try {
    fd = openSync(at(dirFd, name), FILE_FLAGS)
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code
    if (code === 'ENOENT') throw new ToolError(`${shown} does not exist`)
    if (code === 'ELOOP')
      throw new ToolError(`${shown} is a symbolic link at the last step; tools read the file it names only through a path inside the workspace`)
    throw new ToolError(`cannot open ${shown}: ${code ?? (err as Error).message}`)
  }
  try {
    const stat = fstatSync(fd)
    if (stat.isDirectory()) throw new ToolError(`${shown} is a directory; use list_dir to see what is in it`)
    if (!stat.isFile()) throw new ToolError(`${shown} is not a regular file (a FIFO, device or socket); tools read regular files only`)
    if (stat.nlink > 1) throw new ToolError(`${shown} has ${stat.nlink} hard links; tools refuse it, since another name of it may be outside the workspace`)
    return { fd, stat, rel: relOf(boundary, dirFd, name) }
  } catch (err) {
    closeSync(fd)
    throw err
  }
}

/** A directory of the workspace, held open. */
export function openDir(boundary: Boundary, path: string, links = 0): { fd: number; rel: string; close(): void } {
  const parent = walkParent(boundary, path)
  try {
    if (parent.name === '.') {
      const fd = openSync(at(parent.dirFd, '.'), DIR_FLAGS)
      return { fd, rel: relOf(boundary, fd, '.'), close: () => closeSync(fd) }
    }
    let fd: number
    try {
      fd = openSync(at(parent.dirFd, parent.name), DIR_FLAGS)
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code
      if (code === 'ENOENT') throw new ToolError(`${path} does not exist`)
      if (code === 'ENOTDIR') throw new ToolError(`${path} is a file, not a directory; use read_file to read it`)
      if (code === 'ELOOP' && links < MAX_LINKS) return openDir(boundary, followLast(parent, path), links + 1)
      throw new ToolError(`cannot open ${path}: ${code ?? (err as Error).message}`)
    }
    return { fd, rel: relOf(boundary, fd, '.'), close: () => closeSync(fd) }
  } finally {
    parent.close()
  }
}

/** A path ending in a link to a directory: the same path with the link's target (walked again, so checked again). */
function followLast(parent: Parent, path: string): string {
  const target = readlinkSync(at(parent.dirFd, parent.name))
  return isAbsolute(target) ? target : `${dirname(path)}/${target}`
}

export interface DirEntry {
  name: string
  rel: string
  kind: 'file' | 'dir' | 'link' | 'other'
}

/** The entries of a held directory (readdir through its fd: no path to swap). */
export function entriesOf(dirFd: number): Dirent[] {
  return readdirSync(`/proc/self/fd/${dirFd}`, { withFileTypes: true })
}

/** Opens a subdirectory of a held directory, or null (gone, swapped for a link, hidden). */
export function openSub(boundary: Boundary, dirFd: number, name: string): number | null {
  let fd: number
  try {
    fd = openSync(at(dirFd, name), DIR_FLAGS)
  } catch {
    return null
  }
  if (isHidden(boundary, pathOf(fd)) || !inside(boundary.workspace, pathOf(fd))) {
    closeSync(fd)
    return null
  }
  return fd
}

/**
 * Walks a held directory depth-first in name order: links reported, never followed;
 * `skip` names not entered; hidden places neither listed nor entered.
 */
export function* walkFd(
  boundary: Boundary,
  dirFd: number,
  skip: ReadonlySet<string>,
  prefix = '',
  depth = 1,
  maxDepth = Number.POSITIVE_INFINITY,
): Generator<DirEntry & { dirFd: number }> {
  let entries: Dirent[]
  try {
    entries = entriesOf(dirFd)
  } catch {
    return
  }
  entries.sort((a, b) => byCodeUnits(a.name, b.name))
  const dir = pathOf(dirFd)
  for (const e of entries) {
    if (isHidden(boundary, `${dir}/${e.name}`)) continue
    const rel = prefix ? `${prefix}/${e.name}` : e.name
    const kind = e.isSymbolicLink() ? 'link' : e.isDirectory() ? 'dir' : e.isFile() ? 'file' : 'other'
    yield { name: e.name, rel, kind, dirFd }
    if (kind === 'dir' && depth < maxDepth && !skip.has(e.name)) {
      const sub = openSub(boundary, dirFd, e.name)
      if (sub === null) continue
      try {
        yield* walkFd(boundary, sub, skip, rel, depth + 1, maxDepth)
      } finally {
        closeSync(sub)
      }
    }
  }
}

/**
 * Lets the event loop run now and then during a long synchronous walk, so that a stop
 * (SIGINT, --timeout, pause) is seen: an abort signal can only fire between tasks.
 */
export function yielder(everyMs = 50): () => Promise<void> {
  let last = Date.now()
  return async () => {
    if (Date.now() - last < everyMs) return
    await new Promise((resolve) => setImmediate(resolve))
    last = Date.now()
  }
}
