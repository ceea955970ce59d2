import { lstatSync } from 'node:fs'
import { join } from 'node:path'
import { CorruptRecordError, isErrno } from '../../errors.js'
import { readSmallFile } from '../fs/files.js'
import { FILES } from '../fs/layout.js'

/** `.lock`: who owns a task and when it last showed it was alive (docs/contract.md §4). */
export interface LockInfo {
  process_id: number
  hostname: string
  acquired_at: string
  heartbeat_at: string
  /** When the owner last made progress (a turn done, a chat poll): a fresh heartbeat with an old progress_at is a wedged owner. */
  progress_at?: string
  process_start?: string | null
  token?: string
  /** Set by a reaper: the dead owner it is recovering, so that if the reaper dies too, the next one still names the owner. */
  reaping?: Pick<LockInfo, 'process_id' | 'hostname' | 'heartbeat_at'>
  /**
   * The process groups of commands the owner is running (run_command), each with its
   * leader's start time: whoever takes the lock over from a dead owner kills them.
   */
  commands?: RunningCommand[]
}

export interface RunningCommand {
  pgid: number
  start: string | null
}

export interface LockFile {
  info: LockInfo | null
  /** The raw text, to notice that a lock changed between two reads. */
  text: string
  mtimeMs: number
}

export function readLock(dir: string): LockFile | null {
  const path = join(dir, FILES.lock)
  let text: string
  let mtimeMs: number
  try {
    mtimeMs = lstatSync(path).mtimeMs
    text = readSmallFile(path)
  } catch (err) {
    if (isErrno(err, 'ENOENT')) return null
    // A link, a directory or a FIFO where the lock should be: unreadable, so held (see judgeLock).
    if (err instanceof CorruptRecordError) return { info: null, text: '', mtimeMs: 0 }
    throw err
  }
  let info: LockInfo | null = null
  try {
    const raw = JSON.parse(text) as Partial<LockInfo>
    // A pid that cannot be a process (0, -1, 1.5) makes the record as unreadable as garbage.
    if (typeof raw.process_id === 'number' && Number.isInteger(raw.process_id) && raw.process_id > 0 && typeof raw.hostname === 'string') info = raw as LockInfo
  } catch {
    info = null
  }
  return { info, text, mtimeMs }
}
