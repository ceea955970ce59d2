import { closeSync, constants, fstatSync, openSync, readFileSync } from 'node:fs'
import { UsageError } from './errors.js'

/**
 * A file the operator named (a config, a task or prompt file, a recording): opened
 * without blocking, so a FIFO or a device cannot hang the command, and read only when
 * it is a regular file of at most `maxBytes`. Links are followed: the operator chose
 * the path. Every failure is a UsageError naming the file and `hint`.
 */
export function readInputFile(path: string, what: string, hint: string, maxBytes = 1 << 20): string {
  if (path === '') throw new UsageError(`${what}: the path is empty`, hint)
  let fd: number
  try {
    fd = openSync(path, constants.O_RDONLY | constants.O_NONBLOCK)
  } catch (err) {
    throw new UsageError(`${what} ${shortPath(path)} cannot be read (${describeErrno(err)})`, hint)
  }
  try {
    const stat = fstatSync(fd)
    if (!stat.isFile()) throw new UsageError(`${what} ${shortPath(path)} is not a regular file`, hint)
    if (stat.size > maxBytes) throw new UsageError(`${what} ${shortPath(path)} is ${stat.size.toLocaleString('en-US')} bytes; the limit is ${formatLimit(maxBytes)}`, hint)
    return readFileSync(fd, 'utf8')
  } finally {
    closeSync(fd)
  }
}

/** Whether `path` is a regular file (links followed), without opening it. */
export function checkRegularFile(path: string, what: string, hint: string): void {
  let fd: number
  try {
    fd = openSync(path, constants.O_RDONLY | constants.O_NONBLOCK)
  } catch (err) {
    throw new UsageError(`${what} ${shortPath(path)} cannot be read (${describeErrno(err)})`, hint)
  }
  try {
    if (!fstatSync(fd).isFile()) throw new UsageError(`${what} ${shortPath(path)} is not a regular file`, hint)
  } finally {
    closeSync(fd)
  }
}

/** A path cut for a one-line message: its start and its end. */
export function shortPath(path: string, max = 160): string {
  return path.length <= max ? path : `${path.slice(0, 60)}…${path.slice(-(max - 61))}`
}

const ERRNO_TEXT: Record<string, string> = {
  ENOENT: 'no such file',
  EACCES: 'permission denied',
  EPERM: 'permission denied',
  EISDIR: 'it is a directory',
  ENOTDIR: 'a part of the path is not a directory',
  ELOOP: 'too many levels of symbolic links',
  ENAMETOOLONG: 'the path is too long',
  ENXIO: 'no reader or device behind it',
}

/** An fs error in words, without Node's syscall and path. */
export function describeErrno(err: unknown): string {
  const code = (err as NodeJS.ErrnoException).code
  return (code && ERRNO_TEXT[code]) ?? code ?? (err as Error).message
}

function formatLimit(bytes: number): string {
  return bytes >= 1 << 20 ? `${bytes / (1 << 20)} MB` : `${bytes / 1024} KB`
}
