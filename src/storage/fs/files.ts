import {
  constants,
  readdirSync,
  readFileSync,
  readSync,
  chmodSync,
  closeSync,
  fchmodSync,
  fstatSync,
  lstatSync,
  fsyncSync,
  mkdirSync,
  openSync,
  renameSync,
  unlinkSync,
  writeSync,
  fsync,
  rename,
} from 'node:fs'
import { dirname, join } from 'node:path'
import { CorruptRecordError, isErrno } from '../../errors.js'
import { nodeCrypto, nodeFsPromises } from '../../lazy-builtins.js'
import { pidStatus } from './process-info.js'
import { grouped } from '../../text.js'

export const DIR_MODE = 0o700
export const FILE_MODE = 0o600

/**
 * Creates `path` (and missing parents) as 0700 whatever the umask: mkdir's mode is
 * masked by the umask, so every directory we create is chmod-ed afterwards.
 */
export function makePrivateDir(path: string): void {
  try {
    mkdirSync(path, { mode: DIR_MODE })
  } catch (err) {
    if (isErrno(err, 'EEXIST')) return
    if (!isErrno(err, 'ENOENT')) throw err
    makePrivateDir(dirname(path))
    try {
      mkdirSync(path, { mode: DIR_MODE })
    } catch (again) {
      if (isErrno(again, 'EEXIST')) return
      throw again
    }
  }
  chmodSync(path, DIR_MODE)
}

const OPEN_FLAGS = {
  'a+': constants.O_RDWR | constants.O_APPEND | constants.O_CREAT,
  'r+': constants.O_RDWR | constants.O_CREAT,
  wx: constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL,
} as const

/**
 * Opens a file of the tree for writing, 0600 whatever the umask (fchmod when the mode
 * came out different). Never through a link (O_NOFOLLOW: a link planted in a task
 * directory must not make ctxagent write outside it), and never a FIFO or a device
 * (O_NONBLOCK, then only a regular file is kept).
 */
export function openPrivate(path: string, flags: keyof typeof OPEN_FLAGS): number {
  let fd: number
  try {
    fd = openSync(path, OPEN_FLAGS[flags] | constants.O_NOFOLLOW | constants.O_NONBLOCK, FILE_MODE)
  } catch (err) {
    if (isErrno(err, 'ELOOP')) throw notAFileError(path, 'is a symbolic link')
    if (isErrno(err, 'ENXIO')) throw notAFileError(path, 'is not a regular file')
    throw err
  }
  try {
    const stat = fstatSync(fd)
    if (!stat.isFile()) throw notAFileError(path, 'is not a regular file')
    if ((stat.mode & 0o777) !== FILE_MODE) fchmodSync(fd, FILE_MODE)
  } catch (err) {
    closeSync(fd)
    throw err
  }
  return fd
}

/**
 * Refuses a task whose data files are not all regular files (a link planted in it, a
 * FIFO, a directory), before a command that would write to them changes anything.
 */
export function assertRegularFiles(dir: string, names: readonly string[], hint?: string): void {
  for (const name of names) {
    const path = join(dir, name)
    let st
    try {
      st = lstatSync(path)
    } catch (err) {
      if (isErrno(err, 'ENOENT')) continue
      throw err
    }
    if (st.isSymbolicLink()) throw notAFileError(path, 'is a symbolic link', hint)
    if (!st.isFile()) throw notAFileError(path, 'is not a regular file', hint)
  }
}

function notAFileError(path: string, what: string, hint = 'replace it with the file it stands for, or remove it'): CorruptRecordError {
  return new CorruptRecordError(`${path} ${what}; ctxagent reads and writes only regular files in a task tree`, hint)
}

/** Writes all of `data` at the fd's position, looping on short writes. */
export function writeAll(fd: number, data: Buffer | string): void {
  let buf: Buffer
  if (typeof data === 'string') {
    // One write of the string, encoded natively without an intermediate Buffer; a
    // short write (disk full, signal) continues from the bytes that did land.
    const written = writeSync(fd, data)
    if (written === Buffer.byteLength(data)) return
    buf = Buffer.from(data).subarray(written)
  } else {
    buf = data
  }
  let offset = 0
  while (offset < buf.length) offset += writeSync(fd, buf, offset, buf.length - offset)
}

/** Writes all of `buf` at `position` (a positional write: no O_APPEND, see appendShared). */
export function writeAllAt(fd: number, buf: Buffer, position: number): void {
  let offset = 0
  while (offset < buf.length) offset += writeSync(fd, buf, offset, buf.length - offset, position + offset)
}

export function tempPathFor(path: string): string {
  return `${path}.${process.pid}.${nodeCrypto().randomBytes(4).toString('hex')}.tmp`
}

const TEMP = /\.(\d+)\.[0-9a-f]{8}\.tmp$/

/**
 * Removes the temp files of atomic writes (tempPathFor) that killed processes left in
 * `dir`: only those whose process is gone, so a live writer's temp is never touched.
 * Returns how many were removed.
 */
export function removeDeadTemps(dir: string): number {
  const dead = deadTemps(dir)
  for (const path of dead) unlinkQuietly(path)
  return dead.length
}

/** The temp files in `dir` whose writer is provably gone (see removeDeadTemps). */
export function deadTemps(dir: string): string[] {
  let names: string[]
  try {
    names = readdirSync(dir)
  } catch {
    return []
  }
  return names
    .filter((name) => {
      const pid = TEMP.exec(name)?.[1]
      // Only proof of death counts: a pid that cannot be checked keeps its temp file.
      return pid !== undefined && Number(pid) !== process.pid && pidStatus(Number(pid)) === 'gone'
    })
    .map((name) => join(dir, name))
}

/**
 * Writes `data` to a fresh temp file beside `path` (tempPathFor) and fsyncs it; the
 * caller renames or links it into place. On failure (a full disk) the temp file is
 * removed before the error is rethrown, so nothing is left behind.
 */
export function writeTempFor(path: string, data: string | Buffer): string {
  const { tmp, fd } = openTempWith(path, data)
  try {
    fsyncSync(fd)
  } catch (err) {
    closeSync(fd)
    unlinkQuietly(tmp)
    throw err
  }
  closeSync(fd)
  return tmp
}

/** A fresh temp file beside `path` holding `data`, still open (not fsynced); on a failure to write, removed. */
function openTempWith(path: string, data: string | Buffer): { tmp: string; fd: number } {
  const tmp = tempPathFor(path)
  const fd = openPrivate(tmp, 'wx')
  try {
    writeAll(fd, data)
  } catch (err) {
    closeSync(fd)
    unlinkQuietly(tmp)
    throw err
  }
  return { tmp, fd }
}

/**
 * Replaces `path` atomically: write a temp file beside it, fsync, rename over the
 * target, fsync the directory. A reader sees the old file or the new one, never half.
 */
export function writeFileAtomic(path: string, data: string | Buffer, options: { syncDir?: boolean } = {}): void {
  const tmp = writeTempFor(path, data)
  try {
    renameSync(tmp, path)
  } catch (err) {
    unlinkQuietly(tmp)
    throw err
  }
  // Without it, a power cut may bring back the previous file (whole, never half): the
  // owner's per-turn state.json with context.durability: flush, whose appends are not fsynced either.
  if (options.syncDir !== false) fsyncDir(dirname(path))
}

/**
 * writeFileAtomic with its slow part in the thread pool: the temp file is created and
 * written here (the page cache: microseconds), its fsync and the rename over `path`
 * (+ the directory's fsync with `syncDir`) run while the event loop goes on.
 * `beforeRename` may refuse the rename (by throwing): the temp file is then removed and
 * nothing changed.
 */
export function writeFileAtomicAsync(path: string, data: string | Buffer, options: { syncDir?: boolean; beforeRename?: () => void } = {}): Promise<void> {
  const { tmp, fd } = openTempWith(path, data)
  return new Promise<void>((resolve, reject) => {
    const fail = (err: unknown) => {
      try {
        unlinkQuietly(tmp)
      } finally {
        reject(err)
      }
    }
    fsync(fd, (synced) => {
      closeSync(fd)
      if (synced) return fail(synced)
      try {
        options.beforeRename?.()
      } catch (err) {
        return fail(err)
      }
      rename(tmp, path, (renamed) => {
        if (renamed) return fail(renamed)
        if (options.syncDir !== true) return resolve()
        fsyncDirAsync(dirname(path)).then(resolve, resolve)
      })
    })
  })
}

/** fsyncDir in the thread pool (a filesystem that refuses it is no error). */
async function fsyncDirAsync(dir: string): Promise<void> {
  const handle = await nodeFsPromises()
    .open(dir, 'r')
    .catch(() => null)
  if (handle === null) return
  await handle.sync().catch(() => undefined)
  await handle.close()
}

export function fsyncDir(dir: string): void {
  let fd: number | undefined
  try {
    fd = openSync(dir, 'r')
    fsyncSync(fd)
  } catch {
    // Some filesystems refuse fsync on a directory; the rename itself is still atomic.
  } finally {
    if (fd !== undefined) closeSync(fd)
  }
}

export function unlinkQuietly(path: string): void {
  try {
    unlinkSync(path)
  } catch (err) {
    if (!isErrno(err, 'ENOENT')) throw err
  }
}

export function writeJsonAtomic(path: string, value: unknown): void {
  writeFileAtomic(path, `${JSON.stringify(value, null, 2)}\n`)
}

/** Parses a whole-file JSON object (metadata.json, state.json); anything else is a CorruptRecordError. */
export function parseJsonObject(text: string, path: string, hint: string): Record<string, unknown> {
  let raw: unknown
  try {
    raw = JSON.parse(text)
  } catch {
    throw new CorruptRecordError(`${path} is not valid JSON`, hint)
  }
  if (raw === null || typeof raw !== 'object' || Array.isArray(raw)) throw new CorruptRecordError(`${path} is not a JSON object`, hint)
  return raw as Record<string, unknown>
}

const SMALL = Buffer.allocUnsafe(64 * 1024)
/** metadata.json, state.json and .lock are a few KB; past this, the file is not one of them. */
const MAX_SMALL_FILE = 16 * 1024 * 1024

/**
 * A small file (metadata.json, state.json) as text: one open, one read into a
 * reused buffer, one close, where readFileSync also stats and allocates. Larger
 * files fall back to readFileSync. Throws ENOENT like readFileSync.
 */
export function readSmallFile(path: string, max = MAX_SMALL_FILE): string {
  let fd: number
  try {
    fd = openSync(path, READ_FLAGS)
  } catch (err) {
    if (isErrno(err, 'ELOOP')) throw notAFileError(path, 'is a symbolic link')
    throw err
  }
  let n: number
  try {
    n = readSync(fd, SMALL, 0, SMALL.length, 0)
    if (n === SMALL.length) {
      // Larger than the buffer: a big file, or a device that never ends (never read whole).
      const st = fstatSync(fd)
      if (!st.isFile()) throw notAFileError(path, 'is not a regular file')
      if (st.size > max) throw notAFileError(path, `is ${grouped(st.size)} bytes, far more than a task's record ever is`)
      return readFileSync(fd, 'utf8')
    }
    // An empty read may be a FIFO without a writer (opened without blocking) or a device.
    if (n === 0 && !fstatSync(fd).isFile()) throw notAFileError(path, 'is not a regular file')
  } catch (err) {
    // A directory (EISDIR), a FIFO or a device (ESPIPE, EAGAIN): not a task file.
    if (isErrno(err, 'EISDIR') || isErrno(err, 'EAGAIN') || isErrno(err, 'ESPIPE')) throw notAFileError(path, 'is not a regular file')
    throw err
  } finally {
    closeSync(fd)
  }
  return SMALL.toString('utf8', 0, n)
}

/** Reads of task files: never through a link, never blocking on a FIFO. */
const READ_FLAGS = constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK
