import { writeFileSync } from 'node:fs'

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
