import { existsSync, writeFileSync } from 'node:fs'

/**
 * A test's hook into a step of a long operation: with CTXAGENT_TEST_PAUSE_AT=<step>, the
 * process writes its pid to CTXAGENT_TEST_PAUSE_MARKER on reaching that step and waits
 * there, so that a test can SIGKILL it exactly between two writes. Unset, it does nothing.
 */
export async function pauseAtForTest(step: string): Promise<void> {
  if (process.env.CTXAGENT_TEST_PAUSE_AT !== step) return
  const marker = process.env.CTXAGENT_TEST_PAUSE_MARKER
  if (marker !== undefined) writeFileSync(marker, `${process.pid}\n`)
  await new Promise((resolve) => setTimeout(resolve, 2 ** 31 - 1))
}

/**
 * Like pauseAtForTest, but the process goes on once the test removes the marker: with
 * CTXAGENT_TEST_HOLD_AT=<step>, it writes its pid to CTXAGENT_TEST_HOLD_MARKER on reaching
 * that step and waits (signals still handled) until that file is gone. Unset, it does nothing.
 */
export async function holdForTest(step: string): Promise<void> {
  const marker = process.env.CTXAGENT_TEST_HOLD_MARKER
  if (process.env.CTXAGENT_TEST_HOLD_AT !== step || marker === undefined) return
  writeFileSync(marker, `${process.pid}\n`)
  while (existsSync(marker)) await new Promise((resolve) => setTimeout(resolve, 20))
}

/**
 * A test's stand-in for a step that awaits what can never end (docs/contract.md §12.3): with
 * CTXAGENT_TEST_STALL_AT=<step>, the process awaits, at that step, a promise nothing
 * settles and that keeps nothing alive, so its event loop drains. Unset, it does nothing.
 */
export async function stallForTest(step: string): Promise<void> {
  if (process.env.CTXAGENT_TEST_STALL_AT !== step) return
  await new Promise<never>(() => undefined)
}
