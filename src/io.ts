import { Chalk } from 'chalk'
import type { ChalkInstance } from 'chalk'

/**
 * Where a command's output goes. Data to stdout, warnings and errors to stderr;
 * colour only on a TTY and never with NO_COLOR or --no-color.
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
  /** Raw text on stderr (progress bars, interactive prompts). */
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
    out: (text) => void stdout.write(text.endsWith('\n') ? text : `${text}\n`),
    json: (value) => void stdout.write(`${JSON.stringify(value, null, 2)}\n`),
    jsonl: (value) => void stdout.write(`${JSON.stringify(value)}\n`),
    warn: (text) => void stderr.write(`ctxagent: warning: ${text}\n`),
    err: (text) => void stderr.write(text),
  }
}
