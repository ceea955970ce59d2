import { randomBytes } from 'node:crypto'
import { closeSync, constants, fsyncSync, lstatSync, mkdirSync, openSync, realpathSync, renameSync, rmSync, writeSync } from 'node:fs'
import type { Stats } from 'node:fs'
import { basename, dirname, join } from 'node:path'
import { ToolError } from './errors.js'
import type { ToolContext } from './types.js'
import { inside } from './workspace.js'

/**
 * The read-before-write rule: a file may be changed only if this task read it and it
 * has not changed since (mtime and size as read). Stops a model from overwriting what
 * it never saw, or what a person changed meanwhile.
 */
export function checkFresh(ctx: ToolContext, rel: string, real: string): void {
  const stamp = ctx.reads.get(rel)
  if (stamp === undefined) throw new ToolError(`${rel} has not been read by this task; read_file it first, then change it`)
  const now = lstatSync(real)
  if (now.mtimeMs !== stamp.mtimeMs || now.size !== stamp.size) throw new ToolError(`${rel} changed since this task read it; read_file it again before changing it`)
}

/**
 * Replaces (or creates) a file atomically: a temp file in the same directory, opened
 * with O_CREAT|O_EXCL|O_NOFOLLOW (never a link, never someone else's file), fsync'd,
 * then renamed over the path. rename replaces a link swapped in at the last moment
 * instead of following it. Keeps an existing file's mode; records the new stamp.
 */
export function writeWorkspaceFile(ctx: ToolContext, rel: string, real: string, content: string): void {
  let mode = 0o644
  let existing: Stats | null = null
  try {
    existing = lstatSync(real)
  } catch {
    mkdirSync(dirname(real), { recursive: true })
  }
  if (existing?.isSymbolicLink()) throw new ToolError(`${rel} became a symbolic link; not written`)
  if (existing) mode = existing.mode & 0o7777
  const dir = dirname(real)
  const tmp = join(dir, `.${basename(real)}.ctxagent-${randomBytes(4).toString('hex')}.tmp`)
  let fd: number | null = openSync(tmp, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, mode)
  try {
    // A directory swapped for a link after the path was resolved would put the file outside.
    if (!inside(ctx.workspace, realpathSync(dir))) throw new ToolError(`${rel} moved outside the workspace while it was being written; not written`)
    writeSync(fd, content)
    fsyncSync(fd)
    closeSync(fd)
    fd = null
    renameSync(tmp, real)
  } catch (err) {
    if (fd !== null) closeSync(fd)
    rmSync(tmp, { force: true })
    if (err instanceof ToolError) throw err
    throw new ToolError(`cannot write ${rel}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`)
  }
  const stat = lstatSync(real)
  ctx.reads.set(rel, { mtimeMs: stat.mtimeMs, size: stat.size })
}
