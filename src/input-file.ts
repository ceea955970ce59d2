import { closeSync, constants, fstatSync, openSync, readFileSync, readSync } from 'node:fs'
import type { Stats } from 'node:fs'
import { UsageError } from './errors.js'
import { grouped, shortPath } from './text.js'

/** What reading a named file came to: its text, or why not (each caller words it its own way). */
export type RegularRead =
  | { ok: true; text: string; stat: Stats }
  | { ok: false; problem: 'unreadable'; err: unknown }
  | { ok: false; problem: 'directory' | 'special' }
  | { ok: false; problem: 'size'; size: number }

/**
 * A file the operator named, opened without blocking, so a FIFO or a device cannot
 * hang the command, and read only when it is a regular file of at most `maxBytes`
 * (with `maxBytes` null, only checked). Links are followed: the operator chose the path.
 */
export function readRegularFile(path: string, maxBytes: number | null): RegularRead {
  let fd: number
  try {
    fd = openSync(path, constants.O_RDONLY | constants.O_NONBLOCK)
  } catch (err) {
    return { ok: false, problem: 'unreadable', err }
  }
  try {
    const stat = fstatSync(fd)
    if (!stat.isFile()) return { ok: false, problem: stat.isDirectory() ? 'directory' : 'special' }
    if (maxBytes === null) return { ok: true, text: '', stat }
    if (stat.size > maxBytes) return { ok: false, problem: 'size', size: stat.size }
    return { ok: true, text: readFileSync(fd, 'utf8'), stat }
  } catch (err) {
    return { ok: false, problem: 'unreadable', err }
  } finally {
    closeSync(fd)
  }
}

/** A task, prompt or recording file (see readRegularFile); every failure is a UsageError naming the file and `hint`. */
export function readInputFile(path: string, what: string, hint: string, maxBytes = 1 << 20): string {
  return inputOrFail(path, what, hint, maxBytes)
}

/** The most a task or prompt may be, from a file or from standard input: 1 MB. */
export const MAX_TEXT_INPUT = 1 << 20

/**
 * Standard input (`--task-file -`) as text, read in chunks and given up on as soon as it
 * passes `maxBytes`: memory stays bounded by the limit, whatever is piped in.
 */
export function readStdinText(what: string, hint: string, maxBytes = MAX_TEXT_INPUT, fd = 0): string {
  const chunks: Buffer[] = []
  const buffer = Buffer.alloc(64 * 1024)
  let total = 0
  for (;;) {
    let n: number
    try {
      n = readSync(fd, buffer, 0, buffer.length, null)
    } catch (err) {
      // A non-blocking stdin (inherited so) has nothing yet: wait a little, without spinning.
      if ((err as NodeJS.ErrnoException).code === 'EAGAIN') {
        Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 10)
        continue
      }
      if ((err as NodeJS.ErrnoException).code === 'EOF') break
      throw new UsageError(`${what} - (standard input) cannot be read (${describeErrno(err)})`, hint)
    }
    if (n === 0) break
    total += n
    if (total > maxBytes)
      throw new UsageError(`${what} - (standard input) is more than ${grouped(maxBytes)} bytes; the limit is ${formatLimit(maxBytes)}`, hint)
    chunks.push(Buffer.from(buffer.subarray(0, n)))
  }
  return Buffer.concat(chunks, total).toString('utf8')
}

/** Refuses `path` unless it is a regular file (links followed) that can be opened. */
export function checkRegularFile(path: string, what: string, hint: string): void {
  inputOrFail(path, what, hint, null)
}

function inputOrFail(path: string, what: string, hint: string, maxBytes: number | null): string {
  if (path === '') throw new UsageError(`${what}: the path is empty`, hint)
  const read = readRegularFile(path, maxBytes)
  if (read.ok) return read.text
  const named = `${what} ${shortPath(path)}`
  switch (read.problem) {
    case 'unreadable':
      throw new UsageError(`${named} cannot be read (${describeErrno(read.err)})`, hint)
    case 'size':
      throw new UsageError(`${named} is ${grouped(read.size)} bytes; the limit is ${formatLimit(maxBytes as number)}`, hint)
    default:
      throw new UsageError(`${named} is not a regular file`, hint)
  }
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
