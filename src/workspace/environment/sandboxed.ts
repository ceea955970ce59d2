import { spawn } from 'node:child_process'
import { createWriteStream } from 'node:fs'
import type { Readable, Writable } from 'node:stream'
import { MaskingStream } from '../../storage/format/mask-stream.js'
import { sandboxArgs, sandboxEnv, spawnIdentity } from '../../tools/sandbox.js'
import type { SandboxPlan } from '../../tools/sandbox.js'
import { startEgressProxy } from '../../tools/sandbox/egress-proxy.js'
import { SandboxChild } from '../../tools/sandbox/sandbox-child.js'
import { seccompFilter } from '../../tools/sandbox/seccomp.js'

/*
 * One of the environment's scripts (setup, maintenance, test) in the command sandbox
 * (docs/environments.md#what-runs-where): the plan's identity, mounts, seccomp filter and
 * limits, a network of its own (the egress proxy limited to `hosts`, or none), and
 * `secrets` in bwrap's own environment only (never its command line, which other users of
 * the host can read). Output is masked, then written to `log` up to a bound, and its tail
 * kept for the task's record.
 */

export type BwrapPlan = Extract<SandboxPlan, { kind: 'bwrap' }>

export interface ScriptRun {
  plan: BwrapPlan
  workspace: string
  script: string
  /** Hosts the egress proxy lets through (setup_hosts), or null: no network at all. */
  hosts: readonly string[] | null
  /** Private networks let through with the hosts (the operator's tools.allowed_networks). */
  networks?: readonly string[]
  secrets?: Record<string, string>
  timeoutMs: number
  /** Where the whole (bounded) output goes; null: only the tail is kept. */
  log: string | null
  /** Bytes of output written to the log at most. */
  maxLogBytes?: number
  /** The task's stop (SIGINT, SIGTERM, a pause): the script's process group is ended at once (docs/environments.md#a-stop-during-setup). */
  signal?: AbortSignal
  /** Directories shown at paths of their own (an eval's Harbor check: docs/eval.md#harbor-tasks). */
  binds?: readonly { from: string; to: string; readOnly?: boolean }[]
}

export interface ScriptResult {
  /** The exit status; null when killed (timeout) or not started. */
  code: number | null
  timedOut: boolean
  /** Ended by `signal` (or not started because it had fired). */
  stopped: boolean
  /** The last characters of the masked output. */
  tail: string
  ms: number
  /** Why it could not start (the proxy, bwrap missing), else null. */
  error: string | null
}

export const TAIL_CHARS = 4000
const MAX_LOG = 4 * 1024 * 1024
const GRACE_MS = 2000
/** How long output may still come after the script's exit (its pipes drained) before it is taken as ended. */
const DRAIN_MS = 1000

export async function runScript(run: ScriptRun): Promise<ScriptResult> {
  const began = Date.now()
  if (run.signal?.aborted === true) return { code: null, timedOut: false, stopped: true, tail: '', ms: 0, error: null }
  const network = run.hosts === null ? 'none' : 'proxy'
  const plan: BwrapPlan = {
    ...run.plan,
    network,
    egress: { allowedHosts: run.hosts === null ? [] : [...run.hosts], allowedNetworks: [...(run.networks ?? [])] },
  }
  let proxy: Awaited<ReturnType<typeof startEgressProxy>> | null = null
  if (network === 'proxy') {
    try {
      proxy = await startEgressProxy({ settings: plan.egress, by: 'environment', log: () => undefined, owner: plan.identity })
    } catch (err) {
      return {
        code: null,
        timedOut: false,
        stopped: false,
        tail: '',
        ms: Date.now() - began,
        error: `its network proxy could not start: ${(err as Error).message}`,
      }
    }
  }
  try {
    return await spawned(run, plan, proxy?.socket, began)
  } finally {
    await proxy?.close()
  }
}

function spawned(run: ScriptRun, plan: BwrapPlan, socket: string | undefined, began: number): Promise<ScriptResult> {
  return new Promise((resolve) => {
    const args = sandboxArgs(plan, run.workspace, ['/bin/sh', '-c', run.script], {
      ...(socket !== undefined ? { egressSocket: socket } : {}),
      ...(run.binds !== undefined ? { binds: run.binds } : {}),
      info: true,
    })
    // No --clearenv (sandboxArgs without env): bwrap's own environment, set here, is the script's, with HOME, PATH and the proxy's variables over it.
    const child = spawn(plan.bwrap, args, {
      ...spawnIdentity(plan),
      cwd: run.workspace,
      detached: true,
      stdio: ['ignore', 'pipe', 'pipe', 'pipe', 'pipe', 'pipe'],
      env: { ...sandboxEnv(), ...(run.secrets ?? {}) },
    })
    const sandbox = new SandboxChild(child)
    const filter = child.stdio[3] as Writable | null
    filter?.on('error', () => undefined)
    filter?.end(seccompFilter())
    const log = run.log === null ? null : createWriteStream(run.log, { flags: 'a', mode: 0o600 })
    const maxLog = run.maxLogBytes ?? MAX_LOG
    let written = 0
    let dropped = 0
    let tail = ''
    const masking = new MaskingStream((masked) => {
      tail = (tail + masked).slice(-TAIL_CHARS)
      if (log === null) return
      const room = maxLog - written
      if (room <= 0) {
        dropped += masked.length
        return
      }
      const piece = masked.length <= room ? masked : masked.slice(0, room)
      written += piece.length
      dropped += masked.length - piece.length
      log.write(piece)
    })
    for (const stream of [child.stdout as Readable, child.stderr as Readable]) stream.setEncoding('utf8').on('data', (d: string) => masking.push(d))
    let timedOut = false
    let killTimer: NodeJS.Timeout | undefined
    // SIGTERM to everything in the sandbox, SIGKILL after a grace (tools/sandbox/sandbox-child.ts).
    const end = (): void => {
      if (killTimer !== undefined) return
      killTimer = setTimeout(() => sandbox.kill(), GRACE_MS)
      void sandbox.terminate()
    }
    const timer = setTimeout(() => {
      timedOut = true
      end()
    }, run.timeoutMs)
    let stopped = false
    const onStop = (): void => {
      stopped = true
      end()
    }
    run.signal?.addEventListener('abort', onStop, { once: true })
    let error: string | null = null
    child.on('error', (err) => (error = err.message))
    let settled = false
    const settle = (code: number | null): void => {
      if (settled) return
      settled = true
      run.signal?.removeEventListener('abort', onStop)
      clearTimeout(timer)
      clearTimeout(killTimer)
      masking.end()
      const finish = (): void => resolve({ code: timedOut || stopped ? null : code, timedOut, stopped, tail, ms: Date.now() - began, error })
      if (log === null) return finish()
      if (dropped > 0) log.write(`\n[… ${dropped} characters of output not kept; the tail follows …]\n${tail}`)
      log.end(finish)
    }
    child.on('exit', (code) => {
      // Whatever the script left running ends with it; 'close' comes once the pipes are drained, which a process that escaped would hold open.
      sandbox.kill()
      setTimeout(() => {
        for (const stream of [child.stdout, child.stderr]) stream?.destroy()
        settle(code)
      }, DRAIN_MS).unref()
    })
    child.on('close', (code) => settle(code))
  })
}
