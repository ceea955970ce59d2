import { accessSync, constants, statfsSync } from 'node:fs'
import { CtxError } from './errors.js'
import { shortPath } from './text.js'

/**
 * Turns what the operating system or SQLite threw (ENOSPC, EACCES, SQLITE_FULL, …)
 * into the one line of docs/contract.md §9: what happened, where, and what to do. `base` is the
 * task tree, named when the error itself carries no path (a write() has none).
 * Returns null for anything that is not a system error.
 */
export function explainSystemError(err: unknown, base: string): CtxError | null {
  if (err instanceof CtxError || !(err instanceof Error)) return null
  const code = (err as { code?: unknown }).code
  if (typeof code !== 'string') return null
  const path = typeof (err as NodeJS.ErrnoException).path === 'string' ? (err as NodeJS.ErrnoException).path : undefined
  const where = path ?? base
  const fail = (message: string, hint: string) => new CtxError(message, { hint, cause: err })
  if (isDiskFull(err, base)) {
    return fail(
      `no space left on the device holding ${base}${path ? ` (writing ${path})` : ''}`,
      'free some space there and run the command again; every record written before is intact',
    )
  }
  // SQLite's extended codes (SQLITE_BUSY_SNAPSHOT, SQLITE_CORRUPT_INDEX, …) mean what their primary code means.
  switch (/^SQLITE_[A-Z]+/.exec(code)?.[0] ?? code) {
    case 'ENAMETOOLONG':
      return fail(`a path under ${shortPath(base)} is too long for the file system${path ? ` (${shortPath(path)})` : ''}`, 'give a shorter --home')
    case 'ELOOP':
      return fail(`too many levels of symbolic links in ${shortPath(where)}`, 'check --home and the links inside the task tree')
    case 'EACCES':
    case 'EPERM':
      return fail(`permission denied: ${where}`, 'run ctxagent as the user that owns the task tree, or fix its permissions')
    case 'EROFS':
    case 'SQLITE_READONLY':
      return fail(`the task tree ${base} is on a read-only file system`, 'give a writable --home, or remount it read-write')
    case 'ENOTDIR':
      return fail(`${where}: part of this path is not a directory`, 'check --home and that nothing replaced a directory of the task tree with a file')
    case 'EISDIR':
      return fail(`${where} is a directory where a file was expected`, 'move the directory aside')
    case 'EMFILE':
    case 'ENFILE':
      return fail('too many open files', 'raise the limit (ulimit -n) or run fewer agents on this machine')
    case 'EIO':
      return fail(`input/output error under ${where}`, 'the disk may be failing; check the system log')
    case 'SQLITE_CORRUPT':
    case 'SQLITE_NOTADB':
      return fail(`${base}/tasks.db is damaged (${err.message})`, 'move it aside and run ctxagent reindex; the task directories are the truth')
    case 'SQLITE_CANTOPEN': {
      // SQLite does not say why; the tree itself does.
      const why = accessError(base)
      if (why === 'EROFS') return fail(`the task tree ${base} is on a read-only file system`, 'give a writable --home, or remount it read-write')
      if (why === 'EACCES' || why === 'EPERM')
        return fail(`permission denied: ${base}/tasks.db`, 'run ctxagent as the user that owns the task tree, or fix its permissions')
      return fail(`${base}/tasks.db cannot be opened`, 'check that this user may read and write the task tree')
    }
    case 'SQLITE_BUSY':
      return fail(`${base}/tasks.db stayed locked by another process`, 'run the command again')
  }
  return null
}

/** Why tasks.db could not be opened, for a warning that already names tasks.db. */
export function whyIndexUnopenable(err: unknown, base: string): string {
  const code = (err as { code?: unknown } | null)?.code
  const explained = code === 'SQLITE_CANTOPEN' ? null : explainSystemError(err, base)
  return explained?.message ?? (err as Error).message
}

/**
 * A failure of the whole tree rather than of one task (a full disk, a read-only mount):
 * a command that walks many tasks stops on it instead of reporting every task.
 */
export function isTreeWide(err: unknown, base: string): boolean {
  const code = (err as { code?: unknown } | null)?.code
  return code === 'EROFS' || (typeof code === 'string' && code.startsWith('SQLITE_READONLY')) || isDiskFull(err, base)
}

const FULL = new Set(['ENOSPC', 'EDQUOT', 'SQLITE_FULL'])

/**
 * ENOSPC, or SQLite's "disk I/O error" when the device really has no room left: SQLite
 * reports a full disk while mapping its shared-memory file as an I/O error.
 */
export function isDiskFull(err: unknown, base: string): boolean {
  const code = (err as { code?: unknown } | null)?.code
  if (typeof code !== 'string') return false
  if (FULL.has(code)) return true
  if (!code.startsWith('SQLITE_IOERR')) return false
  const free = freeBytes(base)
  return free !== null && free < 1024 * 1024
}

/** Why this user may not read, write and search `dir` (an errno code), or null when it may. */
export function accessError(dir: string): string | null {
  try {
    accessSync(dir, constants.R_OK | constants.W_OK | constants.X_OK)
    return null
  } catch (err) {
    return (err as NodeJS.ErrnoException).code ?? null
  }
}

function freeBytes(path: string): number | null {
  try {
    const s = statfsSync(path)
    return s.bavail * s.bsize
  } catch {
    return null
  }
}
