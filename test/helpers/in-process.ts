import { join } from 'node:path'
import { pathToFileURL } from 'node:url'
import { commandWord } from '../../src/command-word.js'
import { cliAsync, ROOT, TEST_ENV } from './run.js'
import type { CliResult } from './run.js'

/**
 * Runs a command line of ctxagent inside the test's own process: the CLI's `main` from the
 * bundle bin/ctxagent loads for every command but `run` (bundle/cli.js, through Node's own
 * loader, not vitest's), with the call's own argv, environment, working directory, stdout,
 * stderr and exit code. The same code as the binary, without a Node start per call: about a
 * quarter of a second of CPU each, and the suite's operator tests make hundreds of such calls
 * (docs/development.md#tests).
 *
 * For the commands that read the task tree (or rebuild its index) and end: view, list, stats,
 * reindex, config, completion, export, help, --version; and the fleet's `enqueue` and `jobs`
 * (list, show), which add or read a row and end. Not for a command that takes a task's
 * lock, waits, reaps or kills (cleanup, compress, unlock, watch-locks, `jobs cancel` and
 * `jobs retry`, pause: the lock
 * would name this process, which is alive, and a reap could start resumes with vitest's Node
 * flags), nor one that owns the process (run, chat, worker, poll, serve: signals, children,
 * V8's flags), nor anything a test signals or runs several of at once: those stay `cli` and
 * `cliAsync`, real processes. `test/e2e/cli.test.ts` keeps spawning the binary.
 *
 * Calls in one test process run one at a time. While a call runs (an `enqueue` waits on its
 * database), process.env, the working directory and stdout/stderr are the call's: a test
 * spawns nothing and writes nothing of its own until the call has resolved.
 * CTXAGENT_TEST_SPAWN=1 (npm run torture sets it) makes every call a real process, to check
 * that the two agree.
 */
export function cliIn(args: string[], env: Record<string, string> = {}, cwd = ROOT): Promise<CliResult> {
  if (!inProcess(args)) throw new Error(`cliIn: ${JSON.stringify(args.slice(0, 3))} is not a command line it runs (use cli or cliAsync)`)
  if (process.env.CTXAGENT_TEST_SPAWN === '1') return cliAsync(args, env, cwd)
  const call = queue.then(() => runInProcess(args, env, cwd))
  queue = call.catch(() => undefined)
  return call
}

/** In this process when `args` is a command line cliIn runs, else as a real process (cliAsync): for helpers that run any command. */
export function cliAuto(args: string[], env: Record<string, string> = {}, cwd = ROOT): Promise<CliResult> {
  return inProcess(args) ? cliIn(args, env, cwd) : cliAsync(args, env, cwd)
}

/** The commands that read the tree, or queue or read a job, and end by themselves: no lock of a task, no wait, no process of their own. */
const IN_PROCESS = new Set(['view', 'list', 'ls', 'stats', 'reindex', 'config', 'completion', 'export', 'help', 'enqueue', 'jobs'])

/** What `jobs` does that waits for a task to pause (cancel) or changes a job a worker may hold (retry): as processes. */
const JOBS_ACTIONS = /^(cancel|retry)$/

/** Whether cliIn runs `args`: a command of IN_PROCESS, never with an option that waits or repeats. */
export function inProcess(args: readonly string[]): boolean {
  if (args.some((a) => /^--(watch|follow|wait|schedule)(=|$)/.test(a))) return false
  // `-` or `--task-file=-`: a file read from standard input, which is the test process's own here (a pipe that never closes).
  if (args.some((a) => a === '-' || /^--[\w-]+=-$/.test(a))) return false
  const word = commandWord(['node', 'ctxagent', ...args])
  if (word === null) return args.includes('--version') || args.includes('--help') || args.includes('-h')
  if (word === 'jobs' && args.some((a) => JOBS_ACTIONS.test(a))) return false
  return IN_PROCESS.has(word)
}

let queue: Promise<unknown> = Promise.resolve()
let loaded: Promise<{ main: (argv: string[]) => Promise<void> }> | null = null

const SIGNALS = ['SIGINT', 'SIGTERM', 'SIGHUP', 'exit', 'beforeExit'] as const

async function runInProcess(args: string[], env: Record<string, string>, cwd: string): Promise<CliResult> {
  // Through Node's own loader: vitest.config.ts lists bundle/ as external, never transformed as a source.
  loaded ??= import(/* @vite-ignore */ pathToFileURL(join(ROOT, 'bundle', 'cli.js')).href) as Promise<{ main: (argv: string[]) => Promise<void> }>
  const { main } = await loaded
  const saved = {
    argv: process.argv,
    env: { ...process.env },
    cwd: process.cwd(),
    out: process.stdout.write,
    err: process.stderr.write,
    outListeners: process.stdout.listeners('error'),
    errListeners: process.stderr.listeners('error'),
    processListeners: SIGNALS.map((s) => process.listeners(s as NodeJS.Signals)),
    // What the call marks on the streams (command-env's output guard marks a stream it wrapped):
    // taken off with the wrapper, so that the next call wraps its own writes again.
    outMarks: Object.getOwnPropertySymbols(process.stdout),
    errMarks: Object.getOwnPropertySymbols(process.stderr),
  }
  let stdout = ''
  let stderr = ''
  const capture =
    (into: (s: string) => void) =>
    (chunk: string | Uint8Array, encoding?: unknown, done?: unknown): boolean => {
      into(typeof chunk === 'string' ? chunk : Buffer.from(chunk).toString('utf8'))
      const callback = typeof encoding === 'function' ? encoding : done
      if (typeof callback === 'function') queueMicrotask(() => (callback as () => void)())
      return true
    }
  const argv = [process.execPath, join(ROOT, 'bin', 'ctxagent'), ...args]
  process.argv = argv
  for (const [key, value] of Object.entries({ ...TEST_ENV, ...env })) process.env[key] = value
  process.exitCode = undefined
  process.chdir(cwd)
  process.stdout.write = capture((s) => (stdout += s)) as typeof process.stdout.write
  process.stderr.write = capture((s) => (stderr += s)) as typeof process.stderr.write
  let code: number
  try {
    await main(argv)
    code = typeof process.exitCode === 'number' ? process.exitCode : Number(process.exitCode ?? 0)
  } catch (err) {
    // main reports every error itself; one that escapes it is what a process would die of.
    stderr += `${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`
    code = 1
  } finally {
    process.stdout.write = saved.out
    process.stderr.write = saved.err
    process.exitCode = undefined
    process.argv = saved.argv
    process.chdir(saved.cwd)
    for (const key of Object.keys(process.env)) if (!(key in saved.env)) delete process.env[key]
    Object.assign(process.env, saved.env)
    for (const [stream, before, marks] of [
      [process.stdout, saved.outListeners, saved.outMarks],
      [process.stderr, saved.errListeners, saved.errMarks],
    ] as const) {
      for (const l of stream.listeners('error')) if (!before.includes(l)) stream.removeListener('error', l as (...a: unknown[]) => void)
      for (const mark of Object.getOwnPropertySymbols(stream)) {
        if (!marks.includes(mark) && mark.description?.startsWith('ctxagent.')) delete (stream as unknown as Record<symbol, unknown>)[mark]
      }
    }
    SIGNALS.forEach((s, i) => {
      for (const l of process.listeners(s as NodeJS.Signals)) {
        if (!(saved.processListeners[i] ?? []).includes(l)) process.removeListener(s, l as (...a: unknown[]) => void)
      }
    })
  }
  return { code, stdout, stderr }
}
