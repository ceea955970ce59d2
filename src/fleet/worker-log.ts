/**
 * A worker's log on stderr: `ctxagent worker <id>: …` lines, or with --log-format json
 * one JSON object per line, its tasks' lines included (SPEC §14.5): a line a child wrote
 * that is not JSON (a warm child's stray warning) is wrapped in one.
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
      if (format === 'text') return (chunk) => void stream.write(chunk)
      let partial = ''
      return (chunk) => {
        const lines = (partial + chunk.toString()).split('\n')
        partial = lines.pop() ?? ''
        for (const line of lines) {
          if (line.trim() === '') continue
          if (isJsonObject(line)) stream.write(`${line}\n`)
          else json('warn', line, { pid: pid ?? null })
        }
      }
    },
  }
}

function isJsonObject(line: string): boolean {
  if (!line.startsWith('{')) return false
  try {
    const value: unknown = JSON.parse(line)
    return typeof value === 'object' && value !== null && !Array.isArray(value)
  } catch {
    return false
  }
}
