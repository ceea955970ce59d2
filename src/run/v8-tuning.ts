import { setFlagsFromString } from 'node:v8'

let tuned = false

/**
 * V8 settings for the agent loop, set when it is about to start (run, chat, the fleet's
 * tasks, the demo), not at process start. V8 reads each of them when it next compiles or
 * collects, so they take effect for what comes after this call; start-up code, which runs
 * once, is left as V8 would have it.
 *
 * - `--no-lazy-feedback-allocation`, `--always-sparkplug`: a function gets its feedback at
 *   its first call and baseline (Sparkplug) code at once. The turn's code first runs in
 *   turn 1 and, with V8's defaults, runs interpreted for the first dozens of turns: these
 *   make a task's early turns about a third cheaper (BENCHMARKS.md, run-turn). Set at
 *   process start, all of start-up's code got compiled up front: `run` took ~45 ms more
 *   to its first request.
 * - `--heap-growing-percent=100`: after a full GC the old generation may grow to twice
 *   what survived, not V8's up to 4×. A long task's live heap is flat (~20 MB) but its
 *   window turns over steadily, so its peak RSS crept up for thousands of turns as that
 *   slack was reached (~200 MB at turn 10,000 against ~155 MB at turn 1,000); capped, it
 *   stays at ~165 MB for the same CPU time (run-memory). A value given to node itself
 *   (`node --heap-growing-percent=N bin/ctxagent run …`) is kept.
 */
export function tuneV8ForTheLoop(): void {
  if (tuned) return
  tuned = true
  setFlagsFromString('--no-lazy-feedback-allocation')
  setFlagsFromString('--always-sparkplug')
  if (!process.execArgv.some((flag) => /^--heap[-_]growing[-_]percent\b/.test(flag))) setFlagsFromString('--heap-growing-percent=100')
}
