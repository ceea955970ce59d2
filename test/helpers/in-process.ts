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
 * For commands that read or change the task tree and end: view, list, stats, reindex, cleanup,
 * compress, unlock, watch-locks --once, config, completion, export, --help, --version. Not for
 * a command that owns the process (run, chat --wait, worker, poll, serve: signals, children,
 * V8's flags), nor for anything a test signals or runs several of at once: those stay `cli`
 * and `cliAsync`, real processes. The end-to-end suites (test/e2e/cli.test.ts and the
 * bad-input corpus) keep spawning the binary.
 *
 * Calls in one test process run one at a time. CTXAGENT_TEST_SPAWN=1 makes every call a real
 * process, to check that the two agree.
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

/** The commands that end by themselves and own nothing of the process. */
const IN_PROCESS = new Set(['view', 'list', 'ls', 'stats', 'reindex', 'cleanup', 'compress', 'unlock', 'config', 'completion', 'export', 'help', 'jobs'])

/** Whether cliIn runs `args`: a command of IN_PROCESS (watch-locks with --once), never one that waits or repeats. */
export function inProcess(args: readonly string[]): boolean {
  if (args.some((a) => a === '--watch' || a === '--follow' || a === '--wait' || a === '--schedule' || a.startsWith('--schedule='))) return false
  const word = commandWord(['node', 'ctxagent', ...args])
  if (word === null) return args.includes('--version') || args.includes('--help') || args.includes('-h')
  return IN_PROCESS.has(word) || (word === 'watch-locks' && args.includes('--once'))
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
    for (const [stream, before] of [
      [process.stdout, saved.outListeners],
      [process.stderr, saved.errListeners],
    ] as const) {
      for (const l of stream.listeners('error')) if (!before.includes(l)) stream.removeListener('error', l as (...a: unknown[]) => void)
    }
    SIGNALS.forEach((s, i) => {
      for (const l of process.listeners(s as NodeJS.Signals)) {
        if (!(saved.processListeners[i] ?? []).includes(l)) process.removeListener(s, l as (...a: unknown[]) => void)
      }
    })
  }
  return { code, stdout, stderr }
}
