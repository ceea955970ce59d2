import { readFileSync } from 'node:fs'
import { hostname as osHostname } from 'node:os'
import { nodeChildProcess } from '../../lazy-builtins.js'

let cachedHostname: string | undefined

/** This machine's name (asked once: locks compare it for every task). */
export function hostname(): string {
  cachedHostname ??= osHostname()
  return cachedHostname
}

/**
 * An identifier of when process `pid` started, to tell a PID reused by another
 * process from the original (docs/contract.md §4). On Linux: field 22 (`starttime`) of
 * /proc/<pid>/stat, parsed after the last `)` because the command name may contain
 * spaces and parentheses; elsewhere `ps -o lstart=`. Null when it cannot be read.
 */
export function processStart(pid: number): string | null {
  if (process.platform === 'linux') {
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8')
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
      // fields[0] is field 3 (state), so field 22 is at index 19.
      return fields[19] ?? null
    } catch {
      return null
    }
  }
  try {
    const out = nodeChildProcess().execFileSync('ps', ['-o', 'lstart=', '-p', String(pid)], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] })
    return out.trim() || null
  } catch {
    return null
  }
}

export type PidStatus = 'alive' | 'gone' | 'unknown'

/** kill(pid, 0): ESRCH means gone, EPERM means alive under another user. */
export function pidStatus(pid: number): PidStatus {
  if (!Number.isInteger(pid) || pid <= 0) return 'unknown'
  try {
    process.kill(pid, 0)
    return 'alive'
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code
    if (code === 'ESRCH') return 'gone'
    if (code === 'EPERM') return 'alive'
    return 'unknown'
  }
}

/**
 * What this host can tell of a process recorded as `hostname`, `process_id` and
 * `process_start` (a lock's owner, a scratch directory's maker): `alive` (or not checkable:
 * `unknown`), `gone`, its pid `reused` by another process, or `remote` (another host's,
 * judged by its heartbeat only). Reads /proc only.
 */
export function ownerState(
  info: { hostname: string; process_id: number; process_start?: string | null },
  localHost = hostname(),
): 'alive' | 'gone' | 'reused' | 'remote' | 'unknown' {
  if (info.hostname !== localHost) return 'remote'
  const status = pidStatus(info.process_id)
  if (status !== 'alive') return status === 'gone' ? 'gone' : 'unknown'
  if (info.process_start == null) return 'alive'
  const start = processStart(info.process_id)
  return start !== null && start !== info.process_start ? 'reused' : 'alive'
}

/**
 * Kills process group `pgid` left behind by a dead process, if it is still the same
 * group: while its leader runs, the leader's start time must match `start`; once the
 * leader is gone, the id cannot have been given to a new group while members of the
 * old one remain (Linux keeps a pid allocated while it is in use as a group id).
 * Returns whether a signal was delivered.
 */
export function killLeftoverGroup(pgid: number, start: string | null): boolean {
  const leader = pidStatus(pgid)
  if (leader === 'unknown') return false
  if (leader === 'alive' && (start === null || processStart(pgid) !== start)) return false
  try {
    process.kill(-pgid, 'SIGKILL')
    return true
  } catch {
    // ESRCH: nothing of the group is left; EPERM: not ours to kill.
    return false
  }
}
