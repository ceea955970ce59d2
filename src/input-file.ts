import { closeSync, constants, fstatSync, openSync, readFileSync } from 'node:fs'
import { UsageError } from './errors.js'
import { shortPath } from './text.js'

/**
 * A file the operator named (a config, a task or prompt file, a recording): opened
 * without blocking, so a FIFO or a device cannot hang the command, and read only when
 * it is a regular file of at most `maxBytes`. Links are followed: the operator chose
 * the path. Every failure is a UsageError naming the file and `hint`.
 */
export function readInputFile(path: string, what: string, hint: string, maxBytes = 1 << 20): string {
  const fd = openRegular(path, what, hint)
  try {
    const size = fstatSync(fd).size
    if (size > maxBytes) throw new UsageError(`${what} ${shortPath(path)} is ${size.toLocaleString('en-US')} bytes; the limit is ${formatLimit(maxBytes)}`, hint)
    return readFileSync(fd, 'utf8')
  } finally {
    closeSync(fd)
  }
}

/** Refuses `path` unless it is a regular file (links followed) that can be opened. */
export function checkRegularFile(path: string, what: string, hint: string): void {
  closeSync(openRegular(path, what, hint))
}

/** An open descriptor of `path`, opened without blocking, or a UsageError when it cannot be opened or is not a regular file. */
function openRegular(path: string, what: string, hint: string): number {
  if (path === '') throw new UsageError(`${what}: the path is empty`, hint)
  let fd: number
  try {
    fd = openSync(path, constants.O_RDONLY | constants.O_NONBLOCK)
  } catch (err) {
    throw new UsageError(`${what} ${shortPath(path)} cannot be read (${describeErrno(err)})`, hint)
  }
  if (!fstatSync(fd).isFile()) {
    closeSync(fd)
    throw new UsageError(`${what} ${shortPath(path)} is not a regular file`, hint)
  }
  return fd
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
