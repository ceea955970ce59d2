import { basename, dirname, join } from 'node:path'
import lockfile from 'proper-lockfile'

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
 * Runs `write` holding the file's append mutex (a directory made by mkdir, proper-lockfile's
 * way, which is atomic on NFS where O_APPEND is not: SPEC §14.3). Synchronous, because the
 * appends it guards are (one short write each); a writer that died holding it leaves a
 * mutex that is taken over once stale.
 */
export function withAppendMutex<T>(path: string, write: () => T): T {
  const deadline = Date.now() + WAIT_MS
  let release: () => void
  for (let wait = 1; ; wait = Math.min(wait * 2, 25)) {
    try {
      release = lockfile.lockSync(path, { lockfilePath: appendMutexPath(path), realpath: false, stale: STALE_MS, onCompromised: () => undefined })
      break
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ELOCKED' || Date.now() > deadline) throw err
      Atomics.wait(sleeper, 0, 0, wait * (0.5 + Math.random()))
    }
  }
  try {
    return write()
  } finally {
    try {
      release()
    } catch {
      // Taken over as stale meanwhile (this writer was frozen): the write is done; nothing to give back.
    }
  }
}
