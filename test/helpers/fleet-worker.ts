import type { ChildProcess } from 'node:child_process'
import { expect } from 'vitest'
import { exitOf } from './wait.js'

/** SIGTERMs a worker and expects its clean exit (0): the fleet tests' one way to stop a worker that must drain. */
export async function stopCleanly(worker: { child: ChildProcess }): Promise<void> {
  worker.child.kill('SIGTERM')
  expect((await exitOf(worker.child)).code).toBe(0)
}
