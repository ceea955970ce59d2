import { randomBytes } from 'node:crypto'
import { closeSync, constants, fsyncSync, lstatSync, openSync, renameSync, rmSync, writeSync } from 'node:fs'
import type { Stats } from 'node:fs'
import { ToolError } from './errors.js'
import { at } from './fd-walk.js'
import type { Parent } from './fd-walk.js'
import { ownLikeDir } from './owner.js'
import type { ToolContext } from './types.js'

/**
 * The read-before-write rule: a file may be changed only if this task read it and it
 * has not changed since (mtime and size as read). Stops a model from overwriting what
 * it never saw, or what a person changed meanwhile.
 */
export function checkFresh(ctx: ToolContext, rel: string, now: Stats): void {
  const stamp = ctx.reads.get(rel)
  if (stamp === undefined) throw new ToolError(`${rel} has not been read by this task; read_file it first, then change it`)
  if (now.mtimeMs !== stamp.mtimeMs || now.size !== stamp.size)
    throw new ToolError(`${rel} changed since this task read it; read_file it again before changing it`)
}

/** What is at a name of a held directory now (the name itself, a link not followed), or null. */
export function statIn(parent: Parent): Stats | null {
  try {
    return lstatSync(at(parent.dirFd, parent.name))
  } catch {
    return null
  }
}

/**
 * Replaces (or creates) a file atomically inside a held directory: a temp file opened
 * with O_CREAT|O_EXCL|O_NOFOLLOW through the directory's fd, fsync'd, then renamed over
 * the name through the same fd. No path is resolved again, so a directory swapped for a
 * link meanwhile cannot move the write outside; rename replaces a link at the name
 * instead of following it, and never writes into another hard link of the old file.
 * Keeps an existing file's mode (and, as root, its owner); records the new stamp.
 */
export function writeInDir(ctx: ToolContext, parent: Parent, rel: string, content: string, existing: Stats | null): void {
  if (existing?.isSymbolicLink()) throw new ToolError(`${rel} is a symbolic link; tools write files only, give the path of the file it names`)
  if (existing?.isDirectory()) throw new ToolError(`${rel} is a directory`)
  if (existing && !existing.isFile()) throw new ToolError(`${rel} is not a regular file (a FIFO, device or socket); not written`)
  const mode = existing ? existing.mode & 0o7777 : 0o644
  const tmp = `.${parent.name}.ctxagent-${randomBytes(4).toString('hex')}.tmp`
  let fd: number | null = null
  try {
    fd = openSync(at(parent.dirFd, tmp), constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, mode)
    // As root: the owner of the file replaced, or of the directory, so a command (run unprivileged) can change it.
    ownLikeDir(fd, parent.dirFd, existing)
    writeSync(fd, content)
    fsyncSync(fd)
    closeSync(fd)
    fd = null
    renameSync(at(parent.dirFd, tmp), at(parent.dirFd, parent.name))
  } catch (err) {
    if (fd !== null) closeSync(fd)
    rmSync(at(parent.dirFd, tmp), { force: true })
    throw new ToolError(`cannot write ${rel}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`)
  }
  const stat = lstatSync(at(parent.dirFd, parent.name))
  ctx.reads.set(rel, { mtimeMs: stat.mtimeMs, size: stat.size })
}
