import { spawn } from 'node:child_process'
import { defineTool } from './schema.js'
import type { ToolOutcome } from './types.js'

const HEAD = 15_000
const TAIL = 15_000
const GRACE_MS = 2_000
const MAX_TIMEOUT = 600

/** Variables never passed to a command: ctxagent's own secrets. */
const SECRET = /^(OPENAI_API_KEY|ANTHROPIC_API_KEY|GITHUB_TOKEN|GH_TOKEN|GITLAB_TOKEN|CTXAGENT_.*)$/

interface Args {
  command: string
  timeout_seconds?: number
}

export const runCommand = defineTool<Args>({
  name: 'run_command',
  description: 'Run a shell command (sh -c) in the workspace: tests, builds, git. Stdin is closed, so nothing interactive. Returns the exit code and the head and tail of the output.',
  parameters: {
    type: 'object',
    properties: {
      command: { type: 'string', description: 'the command line' },
      timeout_seconds: { type: 'integer', minimum: 1, maximum: MAX_TIMEOUT, description: 'kill it after this long (default 120)' },
    },
    required: ['command'],
  },
  run: ({ command, timeout_seconds: timeout }, ctx) => execute(command, Math.min(timeout ?? ctx.commandTimeoutSeconds, MAX_TIMEOUT), ctx.workspace, ctx.signal),
})

/**
 * Runs one command in its own process group, so that a timeout or a stop kills it
 * with everything it started (SIGTERM, then SIGKILL after a grace period). The output
 * is kept in bounded memory: its head and its tail, whatever its size.
 */
function execute(command: string, timeoutSeconds: number, cwd: string, signal: AbortSignal): Promise<ToolOutcome> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve({ output: 'the command was not started: the task is stopping', status: 'error', error: 'aborted', aborted: true })
    const env = Object.fromEntries(Object.entries(process.env).filter(([key]) => !SECRET.test(key)))
    const child = spawn('/bin/sh', ['-c', command], { cwd, detached: true, stdio: ['ignore', 'pipe', 'pipe'], env: { ...env, PAGER: 'cat', GIT_PAGER: 'cat', GIT_TERMINAL_PROMPT: '0' } })
    const output = new HeadTail()
    child.stdout.setEncoding('utf8').on('data', (d: string) => output.add(d))
    child.stderr.setEncoding('utf8').on('data', (d: string) => output.add(d))
    let ended: 'timeout' | 'aborted' | null = null
    let killTimer: NodeJS.Timeout | null = null
    const killGroup = (sig: NodeJS.Signals) => {
      try {
        if (child.pid !== undefined) process.kill(-child.pid, sig)
      } catch {
        // the group is gone already
      }
    }
    const stop = (why: 'timeout' | 'aborted') => {
      if (ended !== null) return
      ended = why
      killGroup('SIGTERM')
      killTimer = setTimeout(() => killGroup('SIGKILL'), GRACE_MS)
    }
    const timer = setTimeout(() => stop('timeout'), timeoutSeconds * 1000)
    const onAbort = () => stop('aborted')
    signal.addEventListener('abort', onAbort, { once: true })
    let exit: { code: number | null; sig: NodeJS.Signals | null } | null = null
    let settled = false
    const finish = () => {
      if (settled) return
      settled = true
      clearTimeout(timer)
      if (killTimer) clearTimeout(killTimer)
      signal.removeEventListener('abort', onAbort)
      resolve(outcome(command, exit, ended, timeoutSeconds, output.text()))
    }
    child.on('exit', (code, sig) => {
      exit = { code, sig }
      // Whatever the command left running in the background goes with it.
      killGroup('SIGKILL')
      // Output still in flight arrives before 'close'; a process that escaped the group must not hold us forever.
      setTimeout(() => {
        child.stdout.destroy()
        child.stderr.destroy()
        finish()
      }, 1_000).unref()
    })
    child.on('close', finish)
    child.on('error', (err) => {
      output.add(`\n${err.message}`)
      finish()
    })
  })
}

function outcome(command: string, exit: { code: number | null; sig: NodeJS.Signals | null } | null, ended: 'timeout' | 'aborted' | null, timeoutSeconds: number, text: string): ToolOutcome {
  const body = `$ ${command}\n${text}${text.endsWith('\n') || text === '' ? '' : '\n'}`
  if (ended === 'timeout') return { output: `${body}[timed out after ${timeoutSeconds}s; the command and its process group were killed]`, status: 'error', error: `timed out after ${timeoutSeconds}s` }
  if (ended === 'aborted') return { output: `${body}[the task is stopping; the command and its process group were killed]`, status: 'error', error: 'aborted', aborted: true }
  if (exit?.sig) return { output: `${body}[killed by ${exit.sig}]`, status: 'error', error: `killed by ${exit.sig}` }
  // A failing command is a result the model must see, not a tool failure.
  return { output: `${body}[exit code ${exit?.code ?? 'unknown'}]`, status: 'success', error: null }
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
    if (this.tail.length > 2 * TAIL) this.trim()
  }

  text(): string {
    this.trim()
    return this.dropped > 0 ? `${this.head}\n[… ${this.dropped.toLocaleString('en-US')} characters omitted …]\n${this.tail}` : this.head + this.tail
  }

  private trim(): void {
    if (this.tail.length <= TAIL) return
    this.dropped += this.tail.length - TAIL
    this.tail = this.tail.slice(-TAIL)
  }
}
