import { readdirSync, readFileSync } from 'node:fs'
import { hostname } from 'node:os'
import { join } from 'node:path'
import { alive, exitOf } from './wait.js'
import { childrenOf, onHost } from './fleet-hosts.js'
import { startWorker } from './fleet-worker.js'
import type { RunSetup } from '../run/harness.js'

/**
 * The workers of a chaos soak (test/torture/fleet.test.ts): on this host or on a simulated
 * one (fleet-hosts.ts), each found again by the pid this machine sees, so that the soak can
 * SIGKILL, SIGSTOP and SIGCONT it, its agents and its warm child.
 */
export interface ChaosWorker {
  /** The host name its locks and its fleet_workers row record. */
  host: string
  /** Its pid as its host sees it (its fleet_workers row's pid). */
  hostPid: () => number
  /** Its pid as this machine sees it (0 once gone). */
  pid: () => number
  err: () => string
  exited: () => boolean
  /** SIGKILL: on a simulated host, the whole host at once (its agents too), as a crash would. */
  kill: () => Promise<void>
  /** SIGTERM, and its exit code. */
  stop: () => Promise<number | null>
}

export function chaosWorker(s: RunSetup, url: string, host: string | null, args: string[]): ChaosWorker {
  if (host === null) {
    const w = startWorker(s, url, args)
    const exited = () => w.child.exitCode !== null || w.child.signalCode !== null
    return {
      host: hostname(),
      hostPid: () => w.child.pid ?? 0,
      pid: () => (exited() ? 0 : (w.child.pid ?? 0)),
      err: w.err,
      exited,
      kill: async () => {
        w.child.kill('SIGKILL')
        await exitOf(w.child)
      },
      stop: async () => {
        w.child.kill('SIGCONT')
        w.child.kill('SIGTERM')
        return (await exitOf(w.child)).code
      },
    }
  }
  const h = onHost(s, url, host, args)
  const exited = () => h.unshare.exitCode !== null || h.unshare.signalCode !== null
  return {
    host,
    hostPid: () => 1,
    pid: () => (exited() ? 0 : h.workerPid()),
    err: h.err,
    exited,
    kill: async () => {
      const pid = h.workerPid()
      if (pid > 0) process.kill(pid, 'SIGKILL')
      await exitOf(h.unshare)
    },
    stop: async () => {
      const pid = h.workerPid()
      if (pid > 0) {
        process.kill(pid, 'SIGCONT')
        process.kill(pid, 'SIGTERM')
      }
      return (await exitOf(h.unshare)).code
    },
  }
}

/** `pid`'s pid in its own PID namespace (the last NSpid), as its lock records it. */
export function nsPid(pid: number): number {
  try {
    const line = readFileSync(`/proc/${pid}/status`, 'utf8').match(/^NSpid:\s*(.*)$/m)?.[1] ?? String(pid)
    return Number(line.trim().split(/\s+/).at(-1))
  } catch {
    return 0
  }
}

function cmdline(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').replaceAll('\0', ' ')
  } catch {
    return ''
  }
}

export interface Holder {
  uuid: string
  host: string
  /** The pid as this machine sees it. */
  pid: number
}

/** Who holds each task of running/ now, as this machine sees its pid (those whose holder is found). */
export function holders(base: string, workers: ChaosWorker[]): Holder[] {
  const out: Holder[] = []
  const dir = join(base, 'running')
  for (const uuid of readdirSync(dir).filter((n) => /^[0-9a-f-]{36}$/.test(n))) {
    let lock: { process_id?: unknown; hostname?: unknown }
    try {
      lock = JSON.parse(readFileSync(join(dir, uuid, '.lock'), 'utf8')) as typeof lock
    } catch {
      continue
    }
    if (typeof lock.process_id !== 'number' || typeof lock.hostname !== 'string') continue
    if (lock.hostname === hostname()) {
      if (alive(lock.process_id)) out.push({ uuid, host: lock.hostname, pid: lock.process_id })
      continue
    }
    for (const w of workers.filter((x) => x.host === lock.hostname && !x.exited())) {
      const pid = childrenOf(w.pid()).find((p) => nsPid(p) === lock.process_id)
      if (pid !== undefined) out.push({ uuid, host: lock.hostname, pid })
    }
  }
  return out
}

/** The idle pre-started children (warm children holding no task) of the live workers, as this machine sees them. */
export function warmChildren(base: string, workers: ChaosWorker[]): number[] {
  const busy = new Set(holders(base, workers).map((h) => h.pid))
  return workers.filter((w) => !w.exited()).flatMap((w) => childrenOf(w.pid()).filter((p) => !busy.has(p) && cmdline(p).includes('--warm-child')))
}
