import { createHash } from 'node:crypto'
import { lstatSync, mkdtempSync, readdirSync, readlinkSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { hostname, pidStatus, processStart } from './process-info.js'

/*
 * Scratch directories under the system's temporary directory: environment setup's checkout,
 * the egress proxy's socket, delivery's staging git directory (docs/contract.md §16.2).
 * Their maker removes them when it is done; a maker SIGKILLed (the kernel's OOM killer, a
 * host's watchdog) cannot, and a setup's checkout holds the installed dependencies, so a host
 * whose agents are killed during setup would fill its /tmp. Each is therefore named after its
 * maker, `ctxagent-<kind>-<this host and PID namespace>-<pid>-<start>-XXXXXX`, and the first
 * directory of a kind a process makes removes the ones of that kind whose maker is gone.
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

/** A new private directory (0700) of `kind` under the temporary directory; the caller removes it. */
export function makeScratchDir(kind: string): string {
  if (!swept.has(kind)) {
    swept.add(kind)
    sweepScratchDirs(kind)
  }
  const start = processStart(process.pid) ?? '0'
  return mkdtempSync(join(tmpdir(), `ctxagent-${kind}-${tag()}-${process.pid}-${start.replace(/\D/g, '')}-`))
}

/**
 * Removes the directories of `kind` whose maker is gone: made on this host and PID
 * namespace, by a pid no process has now or that another process has (its start time
 * differs). Only directories themselves (never a link) owned by this process's user are
 * touched; one that cannot be removed is left. Returns the paths removed.
 */
export function sweepScratchDirs(kind: string, dir: string = tmpdir()): string[] {
  const pattern = new RegExp(`^ctxagent-${kind}-([0-9a-f]{8})-(\\d+)-(\\d+)-[A-Za-z0-9]{6}$`)
  const removed: string[] = []
  let names: string[]
  try {
    names = readdirSync(dir)
  } catch {
    return removed
  }
  for (const name of names) {
    const m = pattern.exec(name)
    if (m === null || m[1] !== tag()) continue
    const pid = Number(m[2])
    const status = pidStatus(pid)
    const gone = status === 'gone' || (status === 'alive' && (processStart(pid) ?? '').replace(/\D/g, '') !== m[3])
    if (!gone) continue
    const path = join(dir, name)
    try {
      const st = lstatSync(path)
      if (!st.isDirectory() || st.uid !== process.getuid?.()) continue
      rmSync(path, { recursive: true, force: true })
      removed.push(path)
    } catch {
      // Gone meanwhile, or not removable: left as it is.
    }
  }
  return removed
}
