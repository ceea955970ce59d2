import { formatDuration } from '../../duration.js'
import { hostname, ownerState, pidStatus, processStart } from '../fs/process-info.js'
import type { LockFile } from './record.js'

export interface StalenessPolicy {
  staleAfterMs: number
  /** For locks of other hosts, whose pid cannot be checked; default 2 × staleAfterMs. */
  staleAfterRemoteMs?: number | undefined
  /**
   * An operator's explicit request (`run --resume`, `unlock`): on the same host a pid
   * that is gone (or reused) is proof enough, without waiting for the heartbeat to age
   * (a double Ctrl-C leaves a fresh heartbeat and a dead pid). watch-locks, acting on
   * its own, keeps waiting for stale_after as well (docs/contract.md §4).
   */
  deadPidIsProof?: boolean
}

export interface Verdict {
  stale: boolean
  /** Why, in words an operator can act on. */
  reason: string
}

/** judgeLock's reason for a `.lock` that is not a lock record: never a moment of a live lock (locks are written whole), so worth an alert. */
export const UNREADABLE_LOCK = 'lock file is unreadable; treated as held'

/**
 * Is this lock's owner provably dead? Only proof counts: an unreadable lock, or a
 * process whose start time cannot be read, is held.
 */
export function judgeLock(lock: LockFile, now: Date, policy: StalenessPolicy, localHost = hostname()): Verdict {
  const info = lock.info
  if (info === null) return { stale: false, reason: UNREADABLE_LOCK }
  const heartbeat = Date.parse(info.heartbeat_at)
  const nowMs = now.getTime()
  if (info.hostname !== localHost) {
    const limit = policy.staleAfterRemoteMs ?? 2 * policy.staleAfterMs
    // Both clocks must agree it is old: ours (the file's mtime) and theirs (heartbeat_at).
    const newest = Math.max(Number.isNaN(heartbeat) ? 0 : heartbeat, lock.mtimeMs)
    const age = nowMs - newest
    if (age <= limit) return { stale: false, reason: `remote host ${info.hostname}: heartbeat ${ageText(age)} ago` }
    return { stale: true, reason: `remote host ${info.hostname}: no heartbeat for ${ageText(age)}` }
  }
  const age = nowMs - (Number.isNaN(heartbeat) ? lock.mtimeMs : heartbeat)
  if (age <= policy.staleAfterMs) {
    if (policy.deadPidIsProof === true) {
      const exited = exitedOwner(info, localHost)
      if (exited !== null) return { stale: true, reason: `${exited}; last heartbeat ${ageText(age)} ago` }
    }
    return { stale: false, reason: `heartbeat ${ageText(age)} ago` }
  }
  const status = pidStatus(info.process_id)
  if (status === 'gone') return { stale: true, reason: `pid ${info.process_id} is gone; last heartbeat ${ageText(age)} ago` }
  if (status === 'unknown') return { stale: false, reason: `pid ${info.process_id} cannot be checked; treated as held` }
  if (info.process_start == null) return { stale: false, reason: `pid ${info.process_id} is alive` }
  const start = processStart(info.process_id)
  if (start === null) return { stale: false, reason: `pid ${info.process_id} start time unknown; treated as held` }
  if (start !== info.process_start) {
    return { stale: true, reason: `pid ${info.process_id} was reused by another process; last heartbeat ${ageText(age)} ago` }
  }
  return { stale: false, reason: `pid ${info.process_id} is alive (heartbeat ${ageText(age)} ago)` }
}

/** Why a same-host owner is certainly not running, or null when it may be. */
function exitedOwner(info: NonNullable<LockFile['info']>, localHost: string): string | null {
  const state = ownerState(info, localHost)
  if (state === 'gone') return `its agent exited (pid ${info.process_id} is gone)`
  return state === 'reused' ? `its agent exited (pid ${info.process_id} was reused by another process)` : null
}

function ageText(ms: number): string {
  if (ms < 0) return `${formatDuration(-ms)} in the future`
  return formatDuration(ms)
}
