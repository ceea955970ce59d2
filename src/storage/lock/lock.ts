import { existsSync, linkSync, lstatSync, renameSync, rmdirSync, statSync, unlinkSync } from 'node:fs'
import { basename, dirname, join } from 'node:path'
import { CtxError, isErrno, LockedError } from '../../errors.js'
import { deadTemps, removeDeadTemps, unlinkQuietly, writeTempFor } from '../fs/files.js'
import { BLOB_DIR } from '../fs/layout.js'
import { FILES, LOCATIONS } from '../fs/layout.js'
import { readLock } from './record.js'
import type { LockFile, LockInfo } from './record.js'
import { judgeLock } from './staleness.js'
import type { StalenessPolicy, Verdict } from './staleness.js'
import { hostname, killLeftoverGroup, processStart } from '../fs/process-info.js'
import { nodeCrypto } from '../../lazy-builtins.js'

/** The words of a LockLostError whose task directory is nowhere in the tree any more. */
export const VANISHED = 'vanished'

/**
 * Thrown to an owner whose lock was taken from it: it must stop writing. A directory
 * found in none of running/, paused/, completed/ was not taken over but deleted (an
 * agent's `git clean`, an operator's rm): that is said, not "taken over".
 */
export class LockLostError extends CtxError {
  constructor(dir: string, holder: LockInfo | null) {
    const gone = holder === null && !existsAnywhere(dir)
    const by = holder ? `pid ${holder.process_id} on ${holder.hostname}` : 'another process (the lock is gone)'
    super(gone ? `the task directory ${dir} ${VANISHED} (deleted by something else while the task ran)` : `lost the lock of ${dir} to ${by}`, {
      exitCode: 1,
      hint: gone ? 'its files are gone; this process stopped writing' : 'another ctxagent took the task over; this process stopped writing to it',
    })
  }
}

function existsAnywhere(dir: string): boolean {
  const base = dirname(dirname(dir))
  return LOCATIONS.some((location) => existsSync(join(base, location, basename(dir))))
}

/**
 * The short mutual-exclusion section around every change of a `.lock` that is not a
 * plain exclusive create: takeover, heartbeat rewrite and release. Inside it, a
 * re-read of the lock is the truth, so two takers can never both win.
 */
export async function withLockMutex<T>(dir: string, body: () => T | Promise<T>): Promise<T> {
  const release = await lockMutex(dir)
  try {
    return await body()
  } finally {
    await release().catch(() => undefined)
  }
}

const MUTEX_WAIT_MS = 10_000

/**
 * proper-lockfile retries on every error, including ENOENT when the task directory
 * was moved away meanwhile; here only "held by someone else" is waited for.
 */
async function lockMutex(dir: string): Promise<() => Promise<void>> {
  const deadline = Date.now() + MUTEX_WAIT_MS
  // Loaded at the first lock, not by every command that reads tasks (graceful-fs patches fs as it loads; docs/development.md#start-up).
  const { default: lockfile } = await import('proper-lockfile')
  for (let wait = 1; ; wait = Math.min(wait * 2, 25)) {
    try {
      return await lockfile.lock(dir, {
        lockfilePath: join(dir, `${FILES.lock}.mutex`),
        realpath: false,
        stale: 5_000,
        retries: 0,
        onCompromised: () => undefined,
      })
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ELOCKED' || Date.now() > deadline) throw err
      await new Promise((resolve) => setTimeout(resolve, wait * (0.5 + Math.random())))
    }
  }
}

/**
 * The lock's content in a temp file beside the task directory, not inside it: a
 * process that loses a takeover race (or is killed in it) must not leave its temp in a
 * directory that then moves to completed/ with it. link() and rename() into the task
 * directory are atomic all the same (one filesystem). Dead processes' temps are removed
 * from the location directories by watch-locks and cleanup (removeDeadTemps).
 */
function writeLockTemp(dir: string, info: LockInfo): string {
  return writeTempFor(join(dirname(dir), `.${basename(dir)}${FILES.lock}`), `${JSON.stringify(info)}\n`)
}

/**
 * The lock temps (writeLockTemp) that dead holders of this task left beside its directory:
 * a holder killed inside a heartbeat's write leaves one. Looked for only when a stale lock is
 * taken over, when a holder died; watch-locks and cleanup sweep the location directories too.
 */
function removeDeadLockTemps(dir: string): void {
  const mine = `.${basename(dir)}${FILES.lock}.`
  for (const path of deadTemps(dirname(dir))) if (basename(path).startsWith(mine)) unlinkQuietly(path)
}

/** Identity of the lock file as written: a rename or an in-place rewrite changes it. */
function lockIdentity(dir: string): string | null {
  try {
    const st = statSync(join(dir, FILES.lock))
    return `${st.ino}:${st.mtimeMs}:${st.size}`
  } catch {
    return null
  }
}

export interface AcquireOptions extends StalenessPolicy {
  now?: () => Date
  /** Take the lock even from a live holder (`unlock --force`). */
  force?: boolean
  /** Recorded in the lock: whose task this process is recovering (see LockInfo.reaping). */
  reaping?: LockInfo['reaping']
}

/** A `.lock` held by this process. */
export class TaskLock {
  private identity: string | null
  private released = false
  /** Process groups of the dead previous owner's commands that this takeover killed. */
  stoppedCommands: number[] = []

  private constructor(
    private dir: string,
    readonly info: LockInfo,
    private readonly now: () => Date,
  ) {
    this.identity = lockIdentity(dir)
  }

  get directory(): string {
    return this.dir
  }

  get token(): string {
    return this.info.token as string
  }

  /**
   * Takes the lock of `dir`: exclusively created with link(), or taken over when the
   * holder is provably dead. Throws LockedError when a live process holds it.
   */
  static async acquire(dir: string, options: AcquireOptions): Promise<TaskLock> {
    const now = options.now ?? (() => new Date())
    const stamp = now().toISOString()
    const info: LockInfo = {
      process_id: process.pid,
      hostname: hostname(),
      acquired_at: stamp,
      heartbeat_at: stamp,
      progress_at: stamp,
      process_start: processStart(process.pid),
      token: nodeCrypto().randomUUID(),
      ...(options.reaping ? { reaping: options.reaping } : {}),
    }
    const path = join(dir, FILES.lock)
    const tmp = writeLockTemp(dir, info)
    try {
      for (let attempt = 0; attempt < 5; attempt++) {
        try {
          linkSync(tmp, path)
          return TaskLock.taken(dir, info, now)
        } catch (err) {
          if (isErrno(err, 'ENOENT') && !existsSync(dir)) throw movedAway(dir)
          if (!isErrno(err, 'EEXIST')) throw err
        }
        const seen = readLock(dir)
        if (seen === null) continue // released meanwhile: try the exclusive create again
        const verdict = judgeLock(seen, now(), options)
        if (!verdict.stale && options.force !== true) throw heldError(dir, seen, verdict)
        const took = await withLockMutex(dir, () => {
          const again = readLock(dir)
          if (again === null || again.text !== seen.text) return false
          if (options.force !== true && !judgeLock(again, now(), options).stale) return false
          removeNonFileLock(path)
          renameSync(tmp, path)
          return true
        })
        if (took) {
          const lock = TaskLock.taken(dir, info, now)
          if (verdict.stale && seen.info) {
            lock.stoppedCommands = stopLeftoverCommands(seen.info)
            removeDeadLockTemps(dir)
          }
          return lock
        }
      }
      const last = readLock(dir)
      throw heldError(dir, last, { stale: false, reason: 'another process took it first' })
    } finally {
      unlinkQuietly(tmp)
    }
  }

  /** A new holder first removes what dead holders left half-written (temp files of their atomic writes). */
  private static taken(dir: string, info: LockInfo, now: () => Date): TaskLock {
    removeDeadTemps(dir)
    removeDeadTemps(join(dir, BLOB_DIR))
    return new TaskLock(dir, info, now)
  }

  /** Cheap check before a write: the lock file is still the one we wrote. */
  isStillOurs(): boolean {
    return !this.released && lockIdentity(this.dir) === this.identity
  }

  /**
   * Rewrites heartbeat_at, after checking inside the mutex that the token is still
   * ours. Throws LockLostError when the lock was taken from us.
   */
  async heartbeat(): Promise<void> {
    if (this.released) return
    await withLockMutex(this.dir, () => {
      const seen = readLock(this.dir)
      if (seen?.info?.token !== this.token) throw new LockLostError(this.dir, seen?.info ?? null)
      this.info.heartbeat_at = this.now().toISOString()
      const tmp = writeLockTemp(this.dir, this.info)
      try {
        renameSync(tmp, join(this.dir, FILES.lock))
      } catch (err) {
        unlinkQuietly(tmp)
        throw err
      }
      this.identity = lockIdentity(this.dir)
    })
  }

  /** The owner made progress: written with the next heartbeat (no write of its own, so it costs nothing per turn). */
  markProgress(): void {
    this.info.progress_at = this.now().toISOString()
  }

  /**
   * Names a command's process group in the lock while it runs (and drops it when it
   * ends), so that if this process dies, whoever takes the task over kills it.
   */
  async trackCommand(pgid: number, running: boolean): Promise<void> {
    const others = (this.info.commands ?? []).filter((c) => c.pgid !== pgid)
    const commands = running ? [...others, { pgid, start: processStart(pgid) }] : others
    if (commands.length > 0) this.info.commands = commands
    else delete this.info.commands
    await this.heartbeat()
  }

  /** Removes the lock if it is still ours. */
  async release(): Promise<void> {
    if (this.released) return
    this.released = true
    await withLockMutex(this.dir, () => {
      const seen = readLock(this.dir)
      if (seen?.info?.token === this.token) unlinkSync(join(this.dir, FILES.lock))
    })
  }

  /** After the task directory was renamed with the lock inside it. */
  movedTo(dir: string): void {
    this.dir = dir
  }
}

/**
 * Kills what a provably dead owner left running: the process groups of its commands
 * on this host (another host's cannot be reached). Returns the groups killed.
 */
function stopLeftoverCommands(owner: LockInfo): number[] {
  if (owner.hostname !== hostname() || !Array.isArray(owner.commands)) return []
  return owner.commands.filter((c) => Number.isInteger(c?.pgid) && c.pgid > 1 && killLeftoverGroup(c.pgid, c.start ?? null)).map((c) => c.pgid)
}

/**
 * A forced takeover of a `.lock` that is not a file (a link, a FIFO, an empty
 * directory) first removes it: rename() cannot replace a directory with a file. A
 * directory with something in it is not ours to empty: the operator is told.
 */
function removeNonFileLock(path: string): void {
  const st = lstatSync(path, { throwIfNoEntry: false })
  if (st === undefined || st.isFile()) return
  if (!st.isDirectory()) return unlinkSync(path)
  try {
    rmdirSync(path)
  } catch (err) {
    if (isErrno(err, 'ENOTEMPTY') || isErrno(err, 'EEXIST'))
      throw new CtxError(`${path} is a directory with files in it, not a lock`, { hint: 'move it out of the task directory and run the command again' })
    throw err
  }
}

/**
 * The directory left while its lock was being taken: another process (a resume, a
 * reaper) took the task first. A conflict (exit 4) that still reads as ENOENT to
 * callers that look for the move.
 */
function movedAway(dir: string): LockedError {
  const err = new LockedError(
    `${dir} moved away while its lock was being taken: another process took the task first`,
    'see where it is now with ctxagent view <uuid>',
  )
  return Object.assign(err, { code: 'ENOENT' })
}

function heldError(dir: string, lock: LockFile | null, verdict: Verdict): LockedError {
  const who = lock?.info ? `pid ${lock.info.process_id} on ${lock.info.hostname}` : 'an unreadable lock'
  return new LockedError(`${dir} is locked by ${who} (${verdict.reason})`, 'wait for that process, or run ctxagent unlock <uuid> if it is dead')
}
