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
 * - `--semi-space-growth-factor=1`: the young generation stays the size it has when the loop
 *   starts (start-up leaves it at its first 1 MB semi-space) instead of doubling up to 16 MB.
 *   A turn's garbage is short-lived (requests, replies, parsed JSON): 1–2 MB of it is in use
 *   at a scavenge, and the grown space was ~24 MB of RSS for nothing (peak RSS at turn 200:
 *   121.7 → 98.0 MB, CPU a turn within the noise, 0.96× over five paired runs; BENCHMARKS.md,
 *   start-rss). `--max-semi-space-size` would do the same but V8 reads it only when the
 *   process starts; this flag is read at each scavenge. A value given to node is kept.
 */
export function tuneV8ForTheLoop(): void {
  if (tuned) return
  tuned = true
  setFlagsFromString('--no-lazy-feedback-allocation')
  setFlagsFromString('--always-sparkplug')
  if (!process.execArgv.some((flag) => /^--heap[-_]growing[-_]percent\b/.test(flag))) setFlagsFromString('--heap-growing-percent=100')
  if (!process.execArgv.some((flag) => /^--(semi[-_]space[-_]growth[-_]factor|max[-_]semi[-_]space[-_]size)\b/.test(flag)))
    setFlagsFromString('--semi-space-growth-factor=1')
}
