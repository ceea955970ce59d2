import { mkdirSync, rmdirSync, statSync } from 'node:fs'
import { basename, dirname, join } from 'node:path'

/** How long an appender waits for another before it gives up (each holds the mutex for one write). */
const WAIT_MS = 10_000
/** A mutex older than this was left by a writer that died holding it (proper-lockfile's minimum). */
const STALE_MS = 5_000
const sleeper = new Int32Array(new SharedArrayBuffer(4))

/** `<dir>/.<name>.lock`: hidden, like the task's `.lock` and `.state.lock`, so readers of data files pass it by. */
export function appendMutexPath(path: string): string {
  return join(dirname(path), `.${basename(path).replace(/\.jsonl$/, '')}.lock`)
}

/**
 * Runs `write` holding the file's append mutex: a directory made by mkdir, which is atomic
 * on NFS where O_APPEND is not (docs/contract.md §14.3), the protocol proper-lockfile keeps (a mutex
 * whose mtime is older than STALE_MS was left by a writer that died holding it and is
 * taken over). Made here with mkdir, stat and rmdir alone: a hold is one short synchronous
 * write, so proper-lockfile's mtime refresh could never run during it, and its first
 * lockSync costs ~1 ms of every command that audits (view among them).
 */
export function withAppendMutex<T>(path: string, write: () => T): T {
  const mutex = appendMutexPath(path)
  const deadline = Date.now() + WAIT_MS
  for (let wait = 1; !take(mutex); wait = Math.min(wait * 2, 25)) {
    if (Date.now() > deadline) throw Object.assign(new Error('Lock file is already being held'), { code: 'ELOCKED', file: path })
    Atomics.wait(sleeper, 0, 0, wait * (0.5 + Math.random()))
  }
  try {
    return write()
  } finally {
    try {
      rmdirSync(mutex)
    } catch {
      // Taken over as stale meanwhile (this writer was frozen): the write is done; nothing to give back.
    }
  }
}

/** Makes the mutex: true when this process holds it now, false when another does. */
function take(mutex: string): boolean {
  if (made(mutex)) return true
  let mtime: number
  try {
    mtime = statSync(mutex).mtimeMs
  } catch (err) {
    // Released between the mkdir and the stat: one more try.
    if (errno(err) === 'ENOENT') return made(mutex)
    throw err
  }
  if (mtime >= Date.now() - STALE_MS) return false
  // Stale: removed, then made again unless another writer took it over first.
  try {
    rmdirSync(mutex)
  } catch (err) {
    if (errno(err) !== 'ENOENT') throw err
  }
  return made(mutex)
}

/** mkdir of the mutex: true when made, false when it exists; any other failure is thrown. */
function made(mutex: string): boolean {
  try {
    mkdirSync(mutex)
    return true
  } catch (err) {
    if (errno(err) === 'EEXIST') return false
    throw err
  }
}

function errno(err: unknown): string | undefined {
  return (err as NodeJS.ErrnoException).code
}
