import module from 'node:module'

/**
 * Writes the compiled code of every module loaded so far to Node's compile cache now, not
 * only when the process exits (Node 22.10 and later, with the cache bin/ctxagent turns on;
 * nothing on Node 20, which has none). A task's process may run for hours, or be killed,
 * and every command started meanwhile would compile its modules again
 * (docs/development.md#start-up). A cache: when it cannot be written, nothing is lost.
 */
export function keepCompiledCode(): void {
  const flush = (module as { flushCompileCache?: () => void }).flushCompileCache
  if (typeof flush !== 'function') return
  try {
    flush()
  } catch {
    // compiled again next time
  }
}
