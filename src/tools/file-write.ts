import { randomBytes } from 'node:crypto'
import { closeSync, constants, fsyncSync, mkdirSync, openSync, renameSync, statSync, unlinkSync, writeSync } from 'node:fs'
import { dirname, join, basename } from 'node:path'
import { ToolError } from './errors.js'
import type { ToolContext } from './types.js'

/**
 * The read-before-write rule: a file may be changed only if this task read it and it
 * has not changed since (mtime and size as read). Stops a model from overwriting what
 * it never saw, or what a person changed meanwhile.
 */
export function checkFresh(ctx: ToolContext, rel: string, real: string): void {
  const stamp = ctx.reads.get(rel)
  if (stamp === undefined) throw new ToolError(`${rel} has not been read by this task; read_file it first, then edit`)
  const now = statSync(real)
  if (now.mtimeMs !== stamp.mtimeMs || now.size !== stamp.size) throw new ToolError(`${rel} changed since this task read it; read_file it again before editing`)
}

/**
 * Replaces (or creates) a file atomically: a temp file in the same directory, opened
 * with O_EXCL|O_NOFOLLOW, then rename, which replaces a link at the path rather than
 * following it. Keeps an existing file's mode. Records the new stamp as read.
 */
export function writeWorkspaceFile(ctx: ToolContext, rel: string, real: string, content: string): void {
  let mode = 0o644
  try {
    mode = statSync(real).mode & 0o7777
  } catch {
    mkdirSync(dirname(real), { recursive: true })
  }
  const tmp = join(dirname(real), `.${basename(real)}.ctxagent-${randomBytes(4).toString('hex')}.tmp`)
  const fd = openSync(tmp, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, mode)
  try {
    writeSync(fd, content)
    fsyncSync(fd)
  } catch (err) {
    closeSync(fd)
    unlinkSync(tmp)
    throw err
  }
  closeSync(fd)
  try {
    renameSync(tmp, real)
  } catch (err) {
    unlinkSync(tmp)
    throw new ToolError(`cannot write ${rel}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`)
  }
  const stat = statSync(real)
  ctx.reads.set(rel, { mtimeMs: stat.mtimeMs, size: stat.size })
}
