import type { RunLog } from './log.js'
import type { StopController } from './stop.js'

// What SIGINT and SIGTERM do to a run, and the lines that say so (docs/running.md#stops-budgets-and-exit-codes).

/** Who hears of a signal: the run's log once it has one, and the task once it exists; whether it has answered. */
export interface SignalListeners {
  log: RunLog | null
  uuid: string | null
  /** The model has answered: what is left is the ending (delivery, the final summary), which a stop does not pause. */
  answered?: boolean
}

export function pausingText(signal: 'SIGINT' | 'SIGTERM'): string {
  return `${signal}: pausing at once (the LLM request and running tools are stopped)${signal === 'SIGINT' ? '; Ctrl-C again to exit without pausing' : ''}`
}

/** What a first stop does once the task has its answer (docs/running.md#stops-budgets-and-exit-codes): it completes, delivery first. */
export function endingText(signal: 'SIGINT' | 'SIGTERM'): string {
  return `${signal}: the task has its answer and is not paused: its delivery (if asked for) finishes and it completes, its final summary made without the LLM${signal === 'SIGINT' ? '; Ctrl-C again to exit at once (run --resume then finishes the ending)' : ''}`
}

/**
 * The first signal pauses the task; a second Ctrl-C exits at once and leaves the task in
 * running/, so say how to take it back. Returns the function that removes the handlers.
 */
export function pauseOnSignals(stop: StopController, heard: SignalListeners): () => void {
  return stop.handleSignals(
    () => {
      if (heard.uuid !== null)
        heard.log?.warn(
          `stopped at once; the task stays in running/ with its lock. Take it back with: ctxagent run --resume ${heard.uuid} (or ctxagent unlock ${heard.uuid.slice(0, 8)} to fail it)`,
        )
      process.exit(130)
    },
    (signal) => heard.log?.info(heard.answered === true ? endingText(signal) : pausingText(signal)),
  )
}
