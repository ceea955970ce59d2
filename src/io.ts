import { Chalk } from 'chalk'
import type { ChalkInstance } from 'chalk'
import { forColourTerminal, forTerminal } from './terminal-text.js'

/**
 * Where a command's output goes. Data to stdout, warnings and errors to stderr;
 * colour only on a TTY and never with NO_COLOR or --no-color. Every human line (`out`,
 * `warn`) is made safe for a terminal here, whatever the command printed: a task's text,
 * a server's error or a file name may carry escape sequences (OSC 52 sets the clipboard,
 * CSI rewrites the screen), and a pipe may end in a terminal too. Only ctxagent's own
 * colours are kept, when colour is on. JSON output is left exact: JSON escapes them.
 */
export interface Io {
  readonly isTTY: boolean
  readonly stderrIsTTY: boolean
  readonly color: boolean
  readonly chalk: ChalkInstance
  /** Writes a line (or lines) of human output to stdout. */
  out(text: string): void
  /** One JSON document on stdout. */
  json(value: unknown): void
  /** One JSON Lines record on stdout. */
  jsonl(value: unknown): void
  /** `ctxagent: warning: …` on stderr. */
  warn(text: string): void
  /** Raw text on stderr (progress bars, interactive prompts): ctxagent's own words only, never a task's. */
  err(text: string): void
  readonly stdout: NodeJS.WriteStream
  readonly stderr: NodeJS.WriteStream
}

export interface IoOptions {
  stdout?: NodeJS.WriteStream
  stderr?: NodeJS.WriteStream
  color?: boolean
  env?: NodeJS.ProcessEnv
}

export function createIo(options: IoOptions = {}): Io {
  const stdout = options.stdout ?? process.stdout
  const stderr = options.stderr ?? process.stderr
  const env = options.env ?? process.env
  const isTTY = stdout.isTTY === true
  const noColorEnv = env.NO_COLOR !== undefined && env.NO_COLOR !== ''
  const color = isTTY && options.color !== false && !noColorEnv
  // Made when first used: --json output and most errors never colour anything.
  let chalk: ChalkInstance | undefined
  return {
    isTTY,
    stderrIsTTY: stderr.isTTY === true,
    color,
    get chalk() {
      return (chalk ??= new Chalk({ level: color ? 1 : 0 }))
    },
    stdout,
    stderr,
    out: (text) => {
      const safe = color ? forColourTerminal(text) : forTerminal(text)
      stdout.write(safe.endsWith('\n') ? safe : `${safe}\n`)
    },
    json: (value) => void stdout.write(`${JSON.stringify(value, null, 2)}\n`),
    jsonl: (value) => void stdout.write(`${JSON.stringify(value)}\n`),
    warn: (text) => void stderr.write(`ctxagent: warning: ${forTerminal(text)}\n`),
    err: (text) => void stderr.write(text),
  }
}
