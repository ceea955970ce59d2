import { setFlagsFromString } from 'node:v8'

let raised = false

/**
 * From now on V8 allocates a function's feedback at its first call and compiles it to
 * baseline (Sparkplug) code at once (`--no-lazy-feedback-allocation`, `--always-sparkplug`).
 * The turn's code first runs in turn 1 and, left to V8's defaults, runs interpreted for
 * the first dozens of turns: these make a task's early turns about a third cheaper
 * (BENCHMARKS.md, run-turn). Raised when the agent loop is about to start, not at process
 * start: start-up code runs once, and compiling all of it up front made `run` ~45 ms
 * slower to its first request. V8 reads both flags each time it compiles, so they take
 * effect for what compiles after this call.
 */
export function raiseJitTiersEarly(): void {
  if (raised) return
  raised = true
  setFlagsFromString('--no-lazy-feedback-allocation')
  setFlagsFromString('--always-sparkplug')
}
