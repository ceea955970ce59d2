import { SingleBar } from 'cli-progress'
import type { Io } from './io.js'

export interface Progress {
  tick(n?: number): void
  stop(): void
}

/** A progress bar on stderr when it is a TTY (and not --json); nothing otherwise. */
export function createProgress(io: Io, total: number, label: string, enabled = true): Progress {
  if (!enabled || !io.stderrIsTTY || total === 0) return { tick: () => undefined, stop: () => undefined }
  const bar = new SingleBar({
    stream: io.stderr,
    format: `${label} [{bar}] {value}/{total} {percentage}% eta {eta_formatted}`,
    hideCursor: true,
    clearOnComplete: true,
  })
  bar.start(total, 0)
  return { tick: (n = 1) => bar.increment(n), stop: () => bar.stop() }
}
