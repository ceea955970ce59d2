import type { ChildProcess } from 'node:child_process'
import { readFileSync } from 'node:fs'
import type { Duplex, Readable } from 'node:stream'

/*
 * Ending everything a sandboxed command started (docs/security.md#what-a-command-cannot-do).
 * bwrap runs as two processes: the monitor ctxagent spawned, and the sandbox's init (pid 1
 * of its pid namespace, in a session of its own with the command and all it started).
 * Signalling the monitor is not enough: the init dies with it only through
 * --die-with-parent, which the init arms a moment after it is made, so a stop in the first
 * milliseconds of a command killed the monitor and left the sandbox running, holding the
 * output pipes open. So the init's pid is read from bwrap's --info-fd, and a stop goes to
 * the init's process group (SIGTERM: the command, its children and the proxy forwarder,
 * with a grace), then SIGKILL to the init itself, which ends its whole pid namespace.
 *
 * The same late arming let a sandbox outlive ctxagent killed outright (SIGKILL, the OOM
 * killer: no exit hook runs): the monitor died with ctxagent, and the init, still making
 * the sandbox, armed --die-with-parent towards a parent already gone and ran the command
 * for ever. So the command waits at a gate (GATE, first in the sandbox's argv) on a socket
 * whose other end only ctxagent holds: ctxagent opens it once the init has armed (the
 * init installs its seccomp filter right after, which /proc shows); were ctxagent gone,
 * the gate reads end of file and the command never starts.
 */

/** The descriptor bwrap writes its --info-fd JSON to: `{"child-pid": N}`, the init's pid as ctxagent sees it. */
export const INFO_FD = 4

/** The descriptor of the gate's socket, open in the command only until the gate has passed. */
export const GATE_FD = 5

/** The sandbox's first program: says it is there, waits for ctxagent's go (a line), closes the socket, runs the rest of its argv. */
export const GATE = ['/bin/sh', '-c', `printf x >&${GATE_FD} && read -r _ <&${GATE_FD} || exit 125; exec ${GATE_FD}<&-; exec "$@"`, 'sh']

/** Sandboxes whose init may still run: killed when ctxagent exits (a second Ctrl-C, an uncaught error). */
const live = new Set<SandboxChild>()
let exitHook = false

export class SandboxChild {
  /** The init's pid and its start time (field 22 of /proc/<pid>/stat): a pid reused by another process is never signalled. */
  private init: { pid: number; start: string } | null = null
  /** Settled once bwrap has said who its init is, or ended without making one. */
  private readonly known: Promise<void>

  constructor(private readonly monitor: ChildProcess) {
    const info = monitor.stdio[INFO_FD] as Readable | null | undefined
    const gate = (monitor.stdio as readonly unknown[])[GATE_FD] as Duplex | null | undefined
    this.known = new Promise((resolve) => {
      if (info === null || info === undefined) return resolve()
      let text = ''
      info.setEncoding('utf8')
      // Read as it comes: the document is whole once it parses (bwrap writes it right after making its init).
      info.on('data', (d: string) => {
        text += d
        if (this.init !== null) return
        this.init = initFrom(text)
        if (this.init === null) return
        track(this)
        resolve()
      })
      info.on('error', () => resolve())
      info.on('close', () => resolve())
      monitor.on('exit', () => resolve())
    })
    if (gate !== null && gate !== undefined) this.open(gate)
  }

  /** Lets the command past the gate once the init's --die-with-parent is armed (see above); before that, a ctxagent killed leaves the gate shut. */
  private open(gate: Duplex): void {
    gate.on('error', () => undefined)
    let ended = false
    this.monitor.on('exit', () => {
      ended = true
      gate.destroy()
    })
    // The gate speaks once the command is there, by when the init is at most a moment from arming.
    gate.once('data', () => {
      const look = (): void => {
        if (ended) return
        void this.known.then(() => {
          const init = this.init
          if (init === null) return
          if (armed(init.pid)) gate.end('go\n')
          else setTimeout(look, 1)
        })
      }
      look()
    })
  }

  /**
   * A stop's first signal: to the init's process group, which holds the command and
   * everything it started (the init itself, pid 1 of its namespace, ignores it). Without
   * an init (bwrap failed before making one), to the monitor's group.
   */
  async terminate(): Promise<void> {
    await this.known
    if (!this.signalInit('SIGTERM', true)) this.signalMonitor('SIGTERM')
  }

  /** Kills whatever is left: the init (its pid namespace ends with it) and the monitor's group. Synchronous: safe in an exit hook. */
  kill(): void {
    this.signalInit('SIGKILL', false)
    this.signalMonitor('SIGKILL')
    live.delete(this)
  }

  private signalInit(signal: NodeJS.Signals, group: boolean): boolean {
    const init = this.init
    if (init === null || startOf(init.pid) !== init.start) return false
    try {
      process.kill(group ? -init.pid : init.pid, signal)
      return true
    } catch {
      return false
    }
  }

  private signalMonitor(signal: NodeJS.Signals): void {
    try {
      if (this.monitor.pid !== undefined) process.kill(-this.monitor.pid, signal)
    } catch {
      // ESRCH: gone already.
    }
  }
}

function track(sandbox: SandboxChild): void {
  live.add(sandbox)
  if (exitHook) return
  exitHook = true
  process.on('exit', () => {
    for (const s of live) s.kill()
  })
}

/** The init of bwrap's --info-fd document, with its start time; null when there is none or it is gone already. */
function initFrom(text: string): { pid: number; start: string } | null {
  let pid: unknown
  try {
    pid = (JSON.parse(text) as Record<string, unknown>)['child-pid']
  } catch {
    // Not whole yet.
    return null
  }
  if (typeof pid !== 'number' || !Number.isInteger(pid) || pid <= 1) return null
  const start = startOf(pid)
  return start === null ? null : { pid, start }
}

/** Whether bwrap's init has passed handle_die_with_parent: it installs its seccomp filter (always given: tools/sandbox.ts) right after. */
function armed(pid: number): boolean {
  try {
    return /^Seccomp:\s*[12]$/m.test(readFileSync(`/proc/${pid}/status`, 'utf8'))
  } catch {
    return false
  }
}

/** A process's start time in clock ticks since boot (proc(5): /proc/<pid>/stat, field 22), or null when it is gone. */
function startOf(pid: number): string | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8')
    // The command name (field 2) is in parentheses and may hold spaces or parentheses itself: fields are counted after the last ')'.
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19] ?? null
  } catch {
    return null
  }
}
