import { createHash } from 'node:crypto'
import { lstatSync, mkdtempSync, readlinkSync } from 'node:fs'
import { readdir, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { hostname, ownerState, processStart } from './process-info.js'

/*
 * Scratch directories under the system's temporary directory that are worth sweeping:
 * environment setup's checkout (with what setup installed) and delivery's staging git
 * directory (docs/contract.md §16.2). Their maker removes them when it is done; a maker
 * SIGKILLed (the kernel's OOM killer, a host's watchdog) cannot, and a host whose agents are
 * killed during setup would fill its /tmp. Each is therefore named after its maker,
 * `ctxagent-<kind>-<this host and PID namespace>-<pid>-<start>-XXXXXX`, and the first
 * directory of a kind a process makes starts a sweep of the ones of that kind whose maker is
 * gone. (The egress proxy's socket directories are not named so: they hold one socket, and a
 * Unix socket's path has room for little more than the temporary directory's own.)
 */

let ownTag: string | undefined
const swept = new Set<string>()

/** This host and PID namespace, hashed: a pid means the same process only within one. */
function tag(): string {
  if (ownTag === undefined) {
    let namespace = ''
    try {
      namespace = readlinkSync('/proc/self/ns/pid')
    } catch {
      // Not Linux, or no /proc: the host's name alone.
    }
    ownTag = createHash('sha256').update(`${hostname()}\0${namespace}`).digest('hex').slice(0, 8)
  }
  return ownTag
}

/** Linux's start time of `pid` (clock ticks since boot), or null where it cannot be read (no /proc, another user's under hidepid, not Linux). */
function startOf(pid: number): string | null {
  if (process.platform !== 'linux') return null
  const start = processStart(pid)
  return start !== null && /^\d+$/.test(start) ? start : null
}

/**
 * A new private directory (0700) of `kind` under the temporary directory; the caller removes
 * it. The first of a kind in this process sweeps, in the background, the ones its makers left.
 */
export function makeScratchDir(kind: string): string {
  if (!swept.has(kind)) {
    swept.add(kind)
    sweepScratchDirs(kind).catch(() => undefined)
  }
  // `x`: this process's start cannot be read, so its directories are removed only once its pid is gone.
  return mkdtempSync(join(tmpdir(), `ctxagent-${kind}-${tag()}-${process.pid}-${startOf(process.pid) ?? 'x'}-`))
}

/**
 * Removes the directories of `kind` whose maker is gone: made on this host and PID
 * namespace by a pid that no process has now, or that another process has (both start times
 * known, and different). Only directories themselves (never a link) owned by this process's
 * user are touched; one that cannot be removed is left. Resolves to the paths removed.
 */
export async function sweepScratchDirs(kind: string, dir: string = tmpdir()): Promise<string[]> {
  const pattern = new RegExp(`^ctxagent-${kind}-([0-9a-f]{8})-(\\d+)-(\\d+|x)-[A-Za-z0-9]{6}$`)
  const removed: string[] = []
  // Awaited first, so that none of the sweep runs on the path of the makeScratchDir that started it.
  const names = await readdir(dir).catch(() => [])
  for (const name of names) {
    const m = pattern.exec(name)
    if (m === null || m[1] !== tag()) continue
    // The tag made it this host's and PID namespace's: the lock's rule of liveness for the rest.
    const state = ownerState({ hostname: hostname(), process_id: Number(m[2]), process_start: m[3] === 'x' ? null : m[3] })
    if (state !== 'gone' && state !== 'reused') continue
    const path = join(dir, name)
    try {
      const st = lstatSync(path)
      if (!st.isDirectory() || st.uid !== process.getuid?.()) continue
      await rm(path, { recursive: true, force: true })
      removed.push(path)
    } catch {
      // Gone meanwhile, or not removable: left as it is.
    }
  }
  return removed
}
