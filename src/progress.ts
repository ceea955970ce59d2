import { createRequire } from 'node:module'
import type { SingleBar as SingleBarType } from 'cli-progress'
import type { Io } from './io.js'

export interface Progress {
  /** Shows the bar once the amount of work is known. */
  start(total: number): void
  tick(n?: number): void
  stop(): void
}

/** A progress bar on stderr when it is a TTY (and not --json); nothing otherwise. */
export function createProgress(io: Io, label: string, enabled = true): Progress {
  if (!enabled || !io.stderrIsTTY) return { start: () => undefined, tick: () => undefined, stop: () => undefined }
  // Loaded only when a bar will show (a TTY): no cost for cron jobs and pipes.
  const { SingleBar } = createRequire(import.meta.url)('cli-progress') as { SingleBar: typeof SingleBarType }
  const bar = new SingleBar({
    stream: io.stderr,
    format: `${label} [{bar}] {value}/{total} {percentage}% eta {eta_formatted}`,
    hideCursor: true,
    clearOnComplete: true,
  })
  let started = false
  return {
    start: (total) => {
      if (total > 0) bar.start(total, 0), (started = true)
    },
    tick: (n = 1) => {
      if (started) bar.increment(n)
    },
    stop: () => {
      if (started) bar.stop()
    },
  }
}
