import { spawn } from 'node:child_process'
import { constants } from 'node:os'
import type { Readable, Writable } from 'node:stream'
import { bwrapArgs, spawnIdentity } from './sandbox.js'
import { SandboxChild } from './sandbox/sandbox-child.js'
import { limitReached, prlimitArgs } from './sandbox/limits.js'
import type { CommandLimits } from './sandbox/limits.js'
import { startEgressProxy } from './sandbox/egress-proxy.js'
import type { EgressProxy } from './sandbox/egress-proxy.js'
import { seccompFilter } from './sandbox/seccomp.js'
import { defineTool, param } from './schema.js'
import type { ToolContext, ToolOutcome } from './types.js'
import { grouped } from '../text.js'
import { MaskingStream } from '../storage/format/mask-stream.js'

// Head and tail kept of the output; with the marker and the status line the result stays under 30,000 characters.
const HEAD = 14_900
const TAIL = 14_900
const GRACE_MS = 2_000
/** After the shell exits, how long output still in flight (or a pipe held by an escaped process) is waited for. */
const DRAIN_MS = 1_000
const MAX_TIMEOUT = 600

/** Variables never passed to a command: ctxagent's own secrets. */
const SECRET = /^(OPENAI_API_KEY|ANTHROPIC_API_KEY|GITHUB_TOKEN|GH_TOKEN|GITLAB_TOKEN|CTXAGENT_.*)$/

/**
 * Process groups of commands still running. When ctxagent exits while one runs (a
 * second SIGINT exits at once, an uncaught error), the group is killed on the way
 * out: a command that ignores SIGTERM must not outlive its agent.
 */
const liveGroups = new Set<number>()
let exitHookInstalled = false

function trackGroup(pid: number): void {
  liveGroups.add(pid)
  if (exitHookInstalled) return
  exitHookInstalled = true
  process.on('exit', () => {
    for (const group of liveGroups) {
      try {
        process.kill(-group, 'SIGKILL')
      } catch {
        // ESRCH: gone already.
      }
    }
  })
}

type Ending = { how: 'exit'; code: number | null; signal: NodeJS.Signals | null } | { how: 'timeout' | 'aborted' } | { how: 'error'; message: string }

export const runCommand = defineTool({
  name: 'run_command',
  description:
    'Run a shell command (sh -c) in the workspace: tests, builds, git. Stdin is closed, so nothing interactive; background processes do not outlive the command. Returns the exit code and the head and tail of the output.',
  parameters: {
    command: param.text('the command line'),
    timeout_seconds: param.optionalInt(`kill it after this many seconds (default 120, at most ${MAX_TIMEOUT})`),
  },
  run: ({ command, timeout_seconds: timeout }, ctx) => execute(command, Math.min(timeout ?? ctx.commandTimeoutSeconds, MAX_TIMEOUT), ctx),
})

/** The environment of a command: ctxagent's, minus its secrets, with pagers and prompts off. */
function commandEnv(): NodeJS.ProcessEnv {
  const env = Object.fromEntries(Object.entries(process.env).filter(([key]) => !SECRET.test(key)))
  return { ...env, PAGER: 'cat', GIT_PAGER: 'cat', GIT_TERMINAL_PROMPT: '0' }
}

/**
 * With network: proxy, the command's own egress proxy (docs/security.md#the-network)
 * is started first and closed once the command has ended, every connection's record
 * written to the task's tools.jsonl by then.
 */
async function execute(command: string, timeoutSeconds: number, ctx: ToolContext): Promise<ToolOutcome> {
  if (ctx.signal.aborted) return describe({ how: 'aborted' }, timeoutSeconds, '')
  const sandbox = ctx.sandbox
  let proxy: EgressProxy | null = null
  if (sandbox.kind === 'bwrap' && sandbox.network === 'proxy') {
    try {
      proxy = await startEgressProxy({ settings: sandbox.egress, by: 'run_command', log: (record) => ctx.network?.(record), owner: sandbox.identity })
    } catch (err) {
      return describe({ how: 'error', message: `its network proxy could not start: ${(err as Error).message}` }, timeoutSeconds, '')
    }
  }
  try {
    return await spawned(command, timeoutSeconds, ctx, proxy?.socket)
  } finally {
    await proxy?.close()
  }
}

/**
 * Runs one command in its own process group, so that a timeout or a stop kills it
 * with everything it started (SIGTERM, then SIGKILL after a grace period). Whatever it
 * left running in the background is killed when the shell exits. The output is kept
 * in bounded memory: its head and its tail, whatever its size.
 */
function spawned(command: string, timeoutSeconds: number, ctx: ToolContext, egressSocket: string | undefined): Promise<ToolOutcome> {
  const { workspace: cwd, signal } = ctx
  return new Promise((resolve) => {
    const sandbox = ctx.sandbox
    // bwrap itself gets no secret either: its pid 1 keeps bwrap's environment, readable as /proc/1/environ inside.
    // It starts as the sandbox identity (root drops to it here) and reads the seccomp filter from fd 3.
    const child =
      sandbox.kind === 'bwrap'
        ? spawn(sandbox.bwrap, bwrapArgs(sandbox, cwd, command, egressSocket), {
            ...spawnIdentity(sandbox),
            cwd,
            detached: true,
            stdio: ['ignore', 'pipe', 'pipe', 'pipe', 'pipe', 'pipe'],
            env: { PATH: '/usr/bin:/bin' },
          })
        : spawn(...bare(command, sandbox.limits), { cwd, detached: true, stdio: ['ignore', 'pipe', 'pipe'], env: commandEnv() })
    if (sandbox.kind === 'bwrap') {
      const filter = child.stdio[3] as Writable | null
      // EPIPE when bwrap failed before reading it: its exit says why.
      filter?.on('error', () => undefined)
      filter?.end(seccompFilter())
    }
    const sandboxed = sandbox.kind === 'bwrap'
    // A sandboxed command's processes are in bwrap's pid namespace, reached through its init (sandbox/sandbox-child.ts).
    const jail = sandboxed ? new SandboxChild(child) : null
    if (child.pid !== undefined) {
      trackGroup(child.pid)
      ctx.commands?.started(child.pid)
    }
    const output = new HeadTail()
    // Masked before it is cut into head and tail: a secret across the cut would leave as two unmasked pieces (docs/security.md#masking).
    const masking = new MaskingStream((masked) => output.add(masked))
    // Both are pipes (stdio above); the type of a four-fd spawn does not say so.
    const [stdout, stderr] = [child.stdout as Readable, child.stderr as Readable]
    stdout.setEncoding('utf8').on('data', (d: string) => masking.push(d))
    stderr.setEncoding('utf8').on('data', (d: string) => masking.push(d))
    let ending: Ending | null = null
    let killTimer: NodeJS.Timeout | undefined
    const killGroup = (sig: NodeJS.Signals): void => {
      if (jail !== null) {
        if (sig === 'SIGKILL') jail.kill()
        else void jail.terminate()
        return
      }
      try {
        if (child.pid !== undefined) process.kill(-child.pid, sig)
      } catch {
        // ESRCH: the group is gone already.
      }
    }
    const stop = (how: 'timeout' | 'aborted'): void => {
      if (ending !== null) return
      ending = { how }
      killGroup('SIGTERM')
      killTimer = setTimeout(() => killGroup('SIGKILL'), GRACE_MS)
    }
    const timer = setTimeout(() => stop('timeout'), timeoutSeconds * 1000)
    const onAbort = (): void => stop('aborted')
    signal.addEventListener('abort', onAbort, { once: true })
    let settled = false
    const settle = (): void => {
      if (settled) return
      settled = true
      clearTimeout(timer)
      clearTimeout(killTimer)
      signal.removeEventListener('abort', onAbort)
      masking.end()
      resolve(describe(ending ?? { how: 'error', message: 'the command ended without an exit status' }, timeoutSeconds, output.text(), sandbox.limits ?? null))
    }
    child.on('exit', (code, sig) => {
      ending ??= sandboxed ? fromSandbox(code, sig) : { how: 'exit', code, signal: sig }
      killGroup('SIGKILL')
      if (child.pid !== undefined) {
        liveGroups.delete(child.pid)
        ctx.commands?.ended(child.pid)
      }
      // 'close' comes once the pipes are drained; a process that left the group may hold them open.
      setTimeout(() => {
        stdout.destroy()
        stderr.destroy()
        settle()
      }, DRAIN_MS).unref()
    })
    child.on('close', settle)
    child.on('error', (err) => {
      ending ??= { how: 'error', message: err.message }
      settle()
    })
  })
}

/** Without a sandbox: `sh -c command`, under prlimit when there are limits to set. */
function bare(command: string, limits: CommandLimits | undefined): [string, string[]] {
  const [program = '/bin/sh', ...args] = [...(limits ? prlimitArgs(limits) : []), '/bin/sh', '-c', command]
  return [program, args]
}

/** bwrap reports a command killed by a signal as 128+N: shown as the signal, as without a sandbox. */
function fromSandbox(code: number | null, sig: NodeJS.Signals | null): Ending {
  if (code !== null && code > 128) {
    const name = Object.entries(constants.signals).find(([, n]) => n === code - 128)?.[0] as NodeJS.Signals | undefined
    if (name !== undefined) return { how: 'exit', code: null, signal: name }
  }
  return { how: 'exit', code, signal: sig }
}

function describe(ending: Ending, timeoutSeconds: number, text: string, limits: CommandLimits | null = null): ToolOutcome {
  let body = text === '' ? '(no output)' : text.replace(/\n$/, '')
  // A limit reached is said plainly, so the model does not take it for a bug in the code.
  const reached = limits !== null && ending.how === 'exit' ? limitReached(limits, ending.signal, text) : null
  if (reached !== null) body += `\n[${reached}]`
  const killed = 'the command and its process group were killed'
  switch (ending.how) {
    case 'timeout':
      return { output: `timed out after ${timeoutSeconds}s (${killed})\n${body}`, status: 'error', error: `timed out after ${timeoutSeconds}s` }
    case 'aborted':
      return { output: `aborted: the task is stopping (${killed})\n${body}`, status: 'error', error: 'aborted', aborted: true }
    case 'error':
      return { output: `Error: the command could not be run: ${ending.message}\n${body}`, status: 'error', error: ending.message }
    case 'exit':
      // A failing (or crashing) command is a result the model must see, not a failure of the tool.
      return { output: `${ending.signal ? `killed by ${ending.signal}` : `exit code ${ending.code ?? 'unknown'}`}\n${body}`, status: 'success', error: null }
  }
}

/** The first HEAD and last TAIL characters of a stream, in bounded memory. */
class HeadTail {
  private head = ''
  private tail = ''
  private dropped = 0

  add(chunk: string): void {
    if (this.head.length < HEAD) {
      const room = HEAD - this.head.length
      this.head += chunk.slice(0, room)
      chunk = chunk.slice(room)
    }
    if (chunk === '') return
    this.tail += chunk
    // Trimmed in batches: slicing on every small chunk would copy TAIL characters each time.
    if (this.tail.length > 2 * TAIL) this.trim()
  }

  text(): string {
    this.trim()
    return this.dropped > 0 ? `${this.head}\n[… ${grouped(this.dropped)} chars omitted …]\n${this.tail}` : this.head + this.tail
  }

  private trim(): void {
    if (this.tail.length <= TAIL) return
    this.dropped += this.tail.length - TAIL
    this.tail = this.tail.slice(-TAIL)
  }
}
