import { CtxError } from '../errors.js'

/**
 * Node exits when its event loop has nothing left to wait on, whatever promise is still
 * pending: a step of a run that awaits something no timer, socket or child will ever settle
 * (issue 40: the egress proxy's close() awaiting a record that never ended) would make
 * `run` exit 0 with its task in running/. The guard turns that into an error: when the loop
 * drains while the task is unsettled, `stalled` rejects with StalledError and the exit code
 * is set to 1 at once (docs/contract.md §12.3), so even a caller stuck again on its way out
 * cannot end the process with 0.
 */
export class StalledError extends CtxError {
  constructor(uuid: string) {
    super('the run stopped with its task unfinished: nothing was left to wait for (a step awaited what could never end)', {
      hint: `the task is paused; resume with: ctxagent run --resume ${uuid}, and report this with the task's log`,
    })
  }
}

export interface DrainGuard {
  /** Rejects with StalledError when the loop drains before dispose(); never resolves. */
  stalled: Promise<never>
  dispose(): void
}

export function watchDrain(uuid: string): DrainGuard {
  let onDrain = (): void => undefined
  const stalled = new Promise<never>((_resolve, reject) => {
    onDrain = () => {
      process.off('beforeExit', onDrain)
      process.exitCode = 1
      reject(new StalledError(uuid))
    }
  })
  // Handled by whoever races it; unobserved after dispose().
  stalled.catch(() => undefined)
  process.on('beforeExit', onDrain)
  return { stalled, dispose: () => void process.off('beforeExit', onDrain) }
}
