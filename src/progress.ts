import { createRequire } from 'node:module'
import type { SingleBar as SingleBarType } from 'cli-progress'
import type { Io } from './io.js'

export interface Progress {
  tick(n?: number): void
  stop(): void
}

/** A progress bar on stderr when it is a TTY (and not --json); nothing otherwise. */
export function createProgress(io: Io, total: number, label: string, enabled = true): Progress {
  if (!enabled || !io.stderrIsTTY || total === 0) return { tick: () => undefined, stop: () => undefined }
  // Loaded only when a bar will show (a TTY): no cost for cron jobs and pipes.
  const { SingleBar } = createRequire(import.meta.url)('cli-progress') as { SingleBar: typeof SingleBarType }
  const bar = new SingleBar({
    stream: io.stderr,
    format: `${label} [{bar}] {value}/{total} {percentage}% eta {eta_formatted}`,
    hideCursor: true,
    clearOnComplete: true,
  })
  bar.start(total, 0)
  return { tick: (n = 1) => bar.increment(n), stop: () => bar.stop() }
}
