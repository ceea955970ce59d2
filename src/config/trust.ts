import { realpathSync, statSync } from 'node:fs'
import type { Stats } from 'node:fs'
import { dirname } from 'node:path'
import { shortPath } from '../text.js'

/** Why a config file may not be trusted, and what fixes it. */
export interface Untrusted {
  why: string
  fix: string
}

const STICKY = 0o1000
const GROUP_OR_OTHER_WRITE = 0o022

/**
 * sshd's StrictModes for a config file (docs/contract.md §8): the file and every directory up to `/`
 * owned by root or this user, and writable by no one else (a directory may be when it is
 * sticky, like /tmp: then no one can replace a file they do not own). A config names
 * commands ctxagent runs (MCP servers): whoever could change it could run them as us.
 * `file` is the stat of the opened file, so the file checked is the file read.
 */
export function whyUntrusted(path: string, file: Stats, uid: number = process.getuid?.() ?? 0): Untrusted | null {
  const trusted = (st: Stats) => st.uid === 0 || st.uid === uid
  const mode = (st: Stats) => (st.mode & 0o7777).toString(8).padStart(4, '0')
  if (!trusted(file)) return { why: `it is owned by uid ${file.uid}, neither root nor you`, fix: `chown it to root or to uid ${uid}` }
  if ((file.mode & GROUP_OR_OTHER_WRITE) !== 0) return { why: `its group or others may write it (mode ${mode(file)})`, fix: `chmod go-w ${shortPath(path)}` }
  let dir: string
  try {
    dir = dirname(realpathSync(path))
  } catch (err) {
    return { why: `its directory cannot be checked (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`, fix: 'check the path' }
  }
  for (;;) {
    let st: Stats
    try {
      st = statSync(dir)
    } catch (err) {
      return {
        why: `its directory ${shortPath(dir)} cannot be checked (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`,
        fix: 'check the path',
      }
    }
    if (!trusted(st))
      return {
        why: `its directory ${shortPath(dir)} is owned by uid ${st.uid}, neither root nor you`,
        fix: 'keep the config in a directory owned by root or by you',
      }
    if ((st.mode & GROUP_OR_OTHER_WRITE) !== 0 && (st.mode & STICKY) === 0) {
      return {
        why: `its directory ${shortPath(dir)} may be written by its group or others (mode ${mode(st)})`,
        fix: `chmod go-w ${shortPath(dir)}, or keep the config elsewhere`,
      }
    }
    const up = dirname(dir)
    if (up === dir) return null
    dir = up
  }
}
