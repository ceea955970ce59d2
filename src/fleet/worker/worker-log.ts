import { forTerminal } from '../../terminal-text.js'

/**
 * A worker's log on stderr: `ctxagent worker <id>: …` lines, or with --log-format json
 * one JSON object per line, its tasks' lines included (docs/contract.md §14.5): a line a child wrote
 * that is not JSON (a warm child's stray warning) is wrapped in one. Its agents always
 * log JSON lines; in text they are rendered as `run` renders its own.
 */
export interface WorkerLog {
  info(message: string): void
  warn(message: string): void
  /** A job that finally failed (a retried failure is a warning). */
  error(message: string): void
  /** Names the worker once it is registered (its lines carry the id from then on). */
  setId(id: string): void
  /** A relay for one child's stderr: whole lines passed on, in the log's format. */
  relay(pid: number | undefined): (chunk: Buffer) => void
  readonly format: 'text' | 'json'
}

export function createWorkerLog(format: 'text' | 'json', stream: NodeJS.WritableStream = process.stderr): WorkerLog {
  let id: string | null = null
  const json = (level: string, msg: string, fields: Record<string, unknown> = {}): void => {
    stream.write(`${JSON.stringify({ ts: new Date().toISOString(), level, worker: id, msg, ...fields })}\n`)
  }
  const text = (prefix: string, message: string): void => {
    stream.write(`ctxagent worker${id === null ? '' : ` ${id}`}: ${prefix}${message}\n`)
  }
  return {
    format,
    info: (message) => (format === 'json' ? json('info', message) : text('', message)),
    warn: (message) => (format === 'json' ? json('warn', message) : text('warning: ', message)),
    error: (message) => (format === 'json' ? json('error', message) : text('error: ', message)),
    setId: (value) => {
      id = value
    },
    relay: (pid) => {
      let partial = ''
      return (chunk) => {
        const lines = (partial + chunk.toString()).split('\n')
        partial = lines.pop() ?? ''
        for (const line of lines) {
          if (line.trim() === '') continue
          if (format === 'text') {
            const rendered = asText(line)
            if (rendered !== null) text('', rendered)
          } else if (isJsonObject(line)) stream.write(`${line}\n`)
          else json('warn', line, { pid: pid ?? null })
        }
      }
    },
  }
}

/** An agent's log line (docs/running.md#output): level, task uuid and message, as `run` writes them with --log-format json. */
interface AgentLine {
  level?: unknown
  uuid?: unknown
  msg?: unknown
}

function parseObject(line: string): AgentLine | null {
  if (!line.startsWith('{')) return null
  try {
    const value: unknown = JSON.parse(line)
    return typeof value === 'object' && value !== null && !Array.isArray(value) ? (value as AgentLine) : null
  } catch {
    return null
  }
}

function isJsonObject(line: string): boolean {
  return parseObject(line) !== null
}

/**
 * An agent's line as text: `[uuid:1a2b3c4d] message`, as `run` prints it on a terminal;
 * null for the per-turn timing lines (`turn`, for monitoring, which the text log leaves
 * out); a line that is not an agent's JSON as it came. Escapes never reach the terminal.
 */
export function asText(line: string): string | null {
  const parsed = parseObject(line)
  if (parsed === null || typeof parsed.msg !== 'string') return forTerminal(line)
  if (parsed.msg === 'turn' && parsed.level === 'info') return null
  const tag = typeof parsed.uuid === 'string' ? `[uuid:${parsed.uuid.slice(0, 8)}] ` : ''
  const level = parsed.level === 'warn' ? 'warning: ' : parsed.level === 'error' ? 'error: ' : ''
  return `${tag}${level}${forTerminal(parsed.msg)}`
}

/**
 * What a line of an agent's stderr says went wrong, to explain how its process ended: a
 * warning or error it logged, or a line that is not its JSON (`ctxagent: …`, a crash's
 * stack); null for its ordinary progress lines, which say nothing about an end.
 */
export function problemIn(line: string): string | null {
  if (line.trim() === '') return null
  const parsed = parseObject(line)
  if (parsed === null) return line.trim()
  if ((parsed.level === 'warn' || parsed.level === 'error') && typeof parsed.msg === 'string') return parsed.msg
  return null
}
