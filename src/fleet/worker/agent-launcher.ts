import { spawn } from 'node:child_process'
import type { ChildProcess } from 'node:child_process'
import { getPriority, setPriority } from 'node:os'
import type { Writable } from 'node:stream'

/** The hidden flag of `ctxagent worker` that makes it a warm child (src/commands/worker.ts). */
export const WARM_CHILD_FLAG = '--warm-child'

/** A task's environment: the worker's, and a mark that a fleet resumes it (its log then gives no advice to resume by hand). */
const FLEET_ENV = { ...process.env, CTXAGENT_FLEET_JOB: '1' }

export interface LauncherOptions {
  /** How to run ctxagent: [node, bin/ctxagent] or the like. */
  command: string[]
  /** Keep a warm child (worker --prestart). */
  warmChild: boolean
  /** fleet.agent_niceness: nice(1) steps its agents run below the worker. */
  niceness: number
  log: (message: string) => void
  /** Where a child's stderr goes while nothing else reads it. */
  relayFor: (child: ChildProcess) => (chunk: Buffer) => void
  /** Whether a warm child may start now (the worker's policy: a core left over by its running tasks). */
  canStart: () => boolean
}

interface Warm {
  child: ChildProcess
  onIdleOutput: (chunk: Buffer) => void
  onIdleExit: (code: number | null, signal: NodeJS.Signals | null) => void
}

/**
 * Starts a worker's agents, each `ctxagent <args>` in a process group of its own (docs/contract.md
 * §14.2), and keeps at most one warm child: a `ctxagent` started ahead with node and the
 * bundle loaded, handed its arguments through fd 3 when a job comes.
 */
export class AgentLauncher {
  private warm: Warm | null = null
  /** Warm children that died idle in a row: each waits longer before the next is started. */
  private deaths = 0
  private timer: NodeJS.Timeout | null = null
  private stopped = false

  constructor(private readonly options: LauncherOptions) {}

  /** The warm child, handed its arguments, when one is waiting; else a new process. */
  launch(args: string[]): ChildProcess {
    const warm = this.warm
    if (warm !== null && warm.child.exitCode === null && warm.child.signalCode === null) {
      this.warm = null
      warm.child.stderr?.off('data', warm.onIdleOutput)
      warm.child.off('exit', warm.onIdleExit)
      // Its job is sent once the task's standard input is written and closed: `run` reads
      // it with one read to the end, which a pipe still open would answer with EAGAIN.
      let sent = false
      const send = (): void => {
        if (sent) return
        sent = true
        ;(warm.child.stdio[3] as Writable).end(`${JSON.stringify({ args })}\n`)
      }
      warm.child.stdin?.once('finish', send).once('error', send)
      this.deaths = 0
      return warm.child
    }
    return this.spawnAgent(args, ['pipe', 'ignore', 'pipe'])
  }

  /** Starts the next warm child, unless one waits already, one is due, the launcher stopped, or canStart says no. */
  prestart(): void {
    if (!this.options.warmChild || this.stopped || this.warm !== null || this.timer !== null || !this.options.canStart()) return
    const child = this.spawnAgent(['worker', WARM_CHILD_FLAG], ['pipe', 'ignore', 'pipe', 'pipe'])
    const warm: Warm = {
      child,
      // Nothing is expected before its job; whatever comes is the operator's to see.
      onIdleOutput: this.options.relayFor(child),
      onIdleExit: (code, signal) => {
        if (this.warm !== warm) return
        this.warm = null
        if (this.stopped) return
        // Died before it had a job (killed, out of memory, a broken install): another is started, later each time it happens again.
        const delay = Math.min(100 * 2 ** this.deaths, 30_000)
        this.deaths++
        this.options.log(`warm child (pid ${child.pid}) exited idle (${signal ?? `exit ${code}`}); another in ${delay} ms`)
        this.timer = setTimeout(() => {
          this.timer = null
          this.prestart()
        }, delay)
      },
    }
    child.on('error', () => undefined)
    child.stdin?.on('error', () => undefined)
    ;(child.stdio[3] as Writable | null)?.on('error', () => undefined)
    child.stderr?.on('data', warm.onIdleOutput)
    child.on('exit', warm.onIdleExit)
    this.warm = warm
  }

  /** No more warm children; the waiting one ends (its fd 3 closes without a job, and SIGTERM besides). */
  stop(): void {
    this.stopped = true
    if (this.timer !== null) clearTimeout(this.timer)
    this.timer = null
    const warm = this.warm
    this.warm = null
    if (warm === null) return
    ;(warm.child.stdio[3] as Writable | null)?.end()
    signalGroup(warm.child, 'SIGTERM')
  }

  private spawnAgent(args: string[], stdio: ('pipe' | 'ignore')[]): ChildProcess {
    const [program, ...rest] = this.options.command
    return behind(spawn(program as string, [...rest, ...args], { detached: true, stdio, env: FLEET_ENV }), this.options.niceness)
  }
}

/** `signal` to a child's whole process group (its agent and whatever the agent started). */
export function signalGroup(child: ChildProcess, signal: NodeJS.Signals): void {
  try {
    if (child.pid !== undefined) process.kill(-child.pid, signal)
  } catch {
    // already gone
  }
}

/**
 * An agent `steps` nicer than its worker (fleet.agent_niceness): on a host whose agents keep
 * every core busy, the worker's claims, settlements and heartbeats (and the fleet's database,
 * when it is local) still run when they must, instead of waiting behind the agents they
 * dispatch. Measured: 0.89× graphile-worker's tasks a minute at concurrency 16 without, 1.11× with 5.
 */
function behind(child: ChildProcess, steps: number): ChildProcess {
  if (child.pid !== undefined && steps > 0) {
    try {
      setPriority(child.pid, Math.min(19, getPriority() + steps))
    } catch {
      // Gone already, or not allowed: it runs at the worker's priority.
    }
  }
  return child
}
