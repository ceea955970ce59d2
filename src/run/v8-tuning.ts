import { getHeapSpaceStatistics, setFlagsFromString } from 'node:v8'
import { runInNewContext } from 'node:vm'

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

/** Growth of the old generation since the last full GC that lets collectIfGrown collect: an eighth of what survived it, at least 2 MB. */
const GROWTH_SHARE = 1 / 8
const MIN_GROWTH = 2 * 1024 * 1024
/** A collection waits until the process has used this many times its cost in CPU since the last one: at most 1/50 (2 %) of its CPU. */
const CPU_BUDGET = 50

let floor = Number.POSITIVE_INFINITY
let last = { end: Number.NEGATIVE_INFINITY, cost: 0 }
let collect: (() => void) | null = null

/**
 * A full GC of the old generation when it holds an eighth (at least 2 MB) more than what
 * survived the last full GC and the last collection's CPU is under 2 % of what the process
 * used since: the agent loop calls it while its request is out (src/run/turn.ts), the LLM
 * working on it. Returns whether it collected. `cpuMicros` is the process's CPU clock.
 *
 * Why (docs/development.md#memory): a task's live heap is flat (~15 MB in memory-flat's
 * simulation, ~28 MB in a run with 2–44 KB tool outputs), but every message the window keeps
 * for a while is promoted to the old generation and dies there when the window moves on. V8
 * collects that only when the old generation reaches 2× what survived its last full GC
 * (`--heap-growing-percent=100` above), so a task longer than its first full GC carried up to
 * its live heap again in dead messages while a short one never did: memory-flat 108.5 MB at
 * 100,000 messages (old space 32.7 MB, 15.7 MB of it live) against 86.4 MB at 1,000, 1.27×.
 * Collected at an eighth (CPU budget 1/50), 1.07×.
 *
 * Why not a lower `--heap-growing-percent`: it cost ~20 % more CPU a turn (1.5×, measured).
 * One full GC of a 15–30 MB heap costs 25–60 ms of CPU: every ~3,000 turns of the simulation
 * (~0.7 KB promoted a turn); a run promotes ~50 KB a turn, where the CPU budget spaces them
 * (~130 turns apart at 6–7 ms a turn; V8's own full GCs came every ~500). A run's CPU a turn
 * rose by more than the budget in paired runs (+4–8 % at 1/40–1/50, +4 % at 1/100, where
 * memory-flat was 1.14–1.21×): the budget is the knob. `gc` is V8's, exposed to one new
 * context (`--expose-gc` set for that moment only) unless node was given it.
 */
export function collectIfGrown(cpuMicros: () => number = processCpuMicros): boolean {
  const used = oldGenerationBytes()
  floor = Math.min(floor, used)
  if (used - floor < Math.max(MIN_GROWTH, floor * GROWTH_SHARE)) return false
  const start = cpuMicros()
  if (start - last.end < last.cost * CPU_BUDGET) return false
  collect ??= gcFunction()
  collect()
  const end = cpuMicros()
  last = { end, cost: end - start }
  floor = oldGenerationBytes()
  return true
}

/** Bytes in use in the old generation: its space and its large objects (both collected only by a full GC). */
export function oldGenerationBytes(): number {
  let used = 0
  for (const space of getHeapSpaceStatistics()) if (space.space_name === 'old_space' || space.space_name === 'large_object_space') used += space.space_used_size
  return used
}

/** CPU time of the process so far (all its threads, GC helpers included), in microseconds. */
function processCpuMicros(): number {
  const { user, system } = process.cpuUsage()
  return user + system
}

function gcFunction(): () => void {
  const exposed = (globalThis as { gc?: unknown }).gc
  if (typeof exposed === 'function') return exposed as () => void
  setFlagsFromString('--expose-gc')
  try {
    return runInNewContext('gc') as () => void
  } finally {
    setFlagsFromString('--no-expose-gc')
  }
}
