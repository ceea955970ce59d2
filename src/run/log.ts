import { forTerminal } from '../terminal-text.js'
import { grouped } from '../text.js'

/** What the live status line shows (docs/contract.md §12.5). */
export interface Status {
  turn: number
  tokens: number
  window: number
  lastTool: string | null
}

export interface TurnTimings {
  turn: number
  llm_ms: number
  tools_ms: number
  /** Everything else: inbox, compression check, request building, recording, state. */
  overhead_ms: number
  rss_mb: number
}

/**
 * `run`'s log on stderr: every line prefixed `[uuid:` + the task id's first 8 characters + `]` (docs/contract.md §12.5), human
 * text on a TTY, one JSON object per line otherwise or with --log-format json; on a
 * TTY a status line at the bottom, redrawn in place and cleared before each log line.
 */
export interface RunLog {
  info(message: string, fields?: Record<string, unknown>): void
  warn(message: string, fields?: Record<string, unknown>): void
  status(status: Status): void
  /** Per-turn timings: a JSON line in json format (for monitoring and the benchmarks); the status line covers it on a TTY. */
  turn(fields: TurnTimings): void
  /**
   * What the task waits on now (`the LLM (model)`, `run_command npm test`), or null when
   * it stops waiting: on a TTY the status line shows it with the seconds so far, redrawn
   * every second, so a long LLM call or command never looks like a hang.
   */
  waiting?(what: string | null): void
  /** Clears the status line (before the outcome is printed). */
  close(): void
}

export interface LogOptions {
  uuid: string
  stream: NodeJS.WriteStream
  format: 'text' | 'json'
  now: () => Date
}

export function createRunLog(options: LogOptions): RunLog {
  const { stream, format } = options
  const tag = `[uuid:${options.uuid.slice(0, 8)}]`
  const live = format === 'text' && stream.isTTY === true
  let statusShown = false
  const clear = () => {
    if (statusShown) stream.write('\r\x1b[2K')
    statusShown = false
  }
  const line = (level: 'info' | 'warn', message: string, fields: Record<string, unknown> = {}) => {
    if (format === 'json') {
      stream.write(`${JSON.stringify({ ts: options.now().toISOString(), level, uuid: options.uuid, msg: message, ...fields })}\n`)
      return
    }
    clear()
    // Messages quote errors, names and answers from outside: their escape sequences never reach the terminal.
    stream.write(`${tag} ${level === 'warn' ? 'warning: ' : ''}${forTerminal(message)}\n`)
  }
  let last: Status | null = null
  let waitingOn: { what: string; since: number } | null = null
  let ticker: NodeJS.Timeout | null = null
  const draw = () => {
    if (!live) return
    const head = last ? `${tag} turn ${last.turn} · tokens ${grouped(last.tokens)} · window ${grouped(last.window)}` : tag
    const tail = waitingOn
      ? ` · waiting on ${waitingOn.what} ${Math.floor((Date.now() - waitingOn.since) / 1000)}s`
      : last?.lastTool
        ? ` · last tool ${last.lastTool}`
        : ''
    const width = stream.columns ?? 100
    stream.write(`\r\x1b[2K${`${head}${tail}`.slice(0, Math.max(10, width - 1))}`)
    statusShown = true
  }
  return {
    info: (message, fields) => {
      line('info', message, fields)
      if (waitingOn) draw()
    },
    warn: (message, fields) => {
      line('warn', message, fields)
      if (waitingOn) draw()
    },
    status: (s) => {
      last = s
      draw()
    },
    waiting: (what) => {
      if (!live) return
      waitingOn = what === null ? null : { what, since: Date.now() }
      if (ticker) clearInterval(ticker)
      ticker = null
      if (waitingOn) {
        ticker = setInterval(draw, 1000)
        ticker.unref()
      }
      draw()
    },
    turn: (fields) => {
      if (format === 'json') line('info', 'turn', { ...fields })
    },
    close: () => {
      if (ticker) clearInterval(ticker)
      ticker = null
      clear()
    },
  }
}
