/**
 * An eval's figures from its trials (docs/eval.md#the-report): pure, so the same trials
 * give the same report wherever it is read (the terminal, --json, the page).
 */

/** One finished trial: the agent's task and the hidden check's verdict (a line of trials.jsonl). */
export interface Trial {
  task: string
  variant: string
  run: number
  /** The hidden check passed (exit 0) after the agent finished. */
  passed: boolean
  /** How the agent's task ended: completed, timeout (a budget), paused, failed, setup_failed, error. */
  status: string
  uuid: string | null
  usd: number
  tokens: number
  turns: number
  duration_ms: number
  check: { exit_code: number | null; tail: string } | null
  finished_at: string
}

export interface VariantReport {
  name: string
  /** Trials recorded. */
  count: number
  tasks: number
  /** Mean over tasks of each task's share of passing runs. */
  pass_at_1: number
  /** pass@k for k = 1..runs (the unbiased estimator over each task's n runs, averaged over tasks). */
  pass_at_k: Record<string, number>
  solved: number
  usd: number
  usd_per_task: number
  /** null: nothing solved. */
  usd_per_solved: number | null
  tokens_per_task: number
  turns_per_task: number
  seconds_per_task: number
  /** How the trials' tasks ended. */
  endings: Record<string, number>
}

export interface PairedReport {
  a: string
  b: string
  tasks: number
  /** a's pass rate minus b's, over the tasks both ran. */
  pass_diff: number
  ci95: [number, number]
  usd_diff: number
  usd_ci95: [number, number]
}

export const BOOTSTRAP_SAMPLES = 10_000

export function variantReport(name: string, trials: readonly Trial[]): VariantReport {
  const mine = trials.filter((t) => t.variant === name)
  const byTask = groupBy(mine, (t) => t.task)
  const n = Math.max(0, ...[...byTask.values()].map((ts) => ts.length))
  const passAtK: Record<string, number> = {}
  for (let k = 1; k <= n; k++) {
    const per = [...byTask.values()].filter((ts) => ts.length >= k).map((ts) => passAtKOf(ts.length, ts.filter((t) => t.passed).length, k))
    if (per.length > 0) passAtK[String(k)] = mean(per)
  }
  const usd = sum(mine.map((t) => t.usd))
  const solved = mine.filter((t) => t.passed).length
  const endings: Record<string, number> = {}
  for (const t of mine) endings[t.status] = (endings[t.status] ?? 0) + 1
  const count = Math.max(mine.length, 1)
  return {
    name,
    count: mine.length,
    tasks: byTask.size,
    pass_at_1: mean([...byTask.values()].map((ts) => ts.filter((t) => t.passed).length / ts.length)),
    pass_at_k: passAtK,
    solved,
    usd,
    usd_per_task: usd / count,
    usd_per_solved: solved === 0 ? null : usd / solved,
    tokens_per_task: sum(mine.map((t) => t.tokens)) / count,
    turns_per_task: sum(mine.map((t) => t.turns)) / count,
    seconds_per_task: sum(mine.map((t) => t.duration_ms)) / 1000 / count,
    endings,
  }
}

/**
 * a against b over the tasks both ran: the mean of the per-task differences (pass rate
 * and $ per trial) and a 95 % interval by a paired bootstrap over tasks (tasks drawn with
 * replacement, BOOTSTRAP_SAMPLES times, the 2.5th and 97.5th percentiles of the mean
 * difference), seeded so that the same trials give the same interval.
 */
export function pairedReport(a: string, b: string, trials: readonly Trial[], seed: number): PairedReport | null {
  const ofA = groupBy(
    trials.filter((t) => t.variant === a),
    (t) => t.task,
  )
  const ofB = groupBy(
    trials.filter((t) => t.variant === b),
    (t) => t.task,
  )
  const tasks = [...ofA.keys()].filter((task) => ofB.has(task)).sort()
  if (tasks.length === 0) return null
  const rate = (ts: readonly Trial[]) => ts.filter((t) => t.passed).length / ts.length
  const cost = (ts: readonly Trial[]) => sum(ts.map((t) => t.usd)) / ts.length
  const passDiffs = tasks.map((task) => rate(ofA.get(task) as Trial[]) - rate(ofB.get(task) as Trial[]))
  const usdDiffs = tasks.map((task) => cost(ofA.get(task) as Trial[]) - cost(ofB.get(task) as Trial[]))
  return {
    a,
    b,
    tasks: tasks.length,
    pass_diff: mean(passDiffs),
    ci95: bootstrapInterval(passDiffs, seed),
    usd_diff: mean(usdDiffs),
    usd_ci95: bootstrapInterval(usdDiffs, seed + 1),
  }
}

/** pass@k from n runs of which c passed: 1 − C(n−c, k) / C(n, k), the chance that k runs drawn from the n hold a pass. */
export function passAtKOf(n: number, c: number, k: number): number {
  if (n - c < k) return 1
  let none = 1
  for (let i = n - c + 1; i <= n; i++) none *= 1 - k / i
  return 1 - none
}

export function bootstrapInterval(diffs: readonly number[], seed: number, samples = BOOTSTRAP_SAMPLES): [number, number] {
  if (diffs.length === 0) return [0, 0]
  const random = mulberry32(seed)
  const means = new Float64Array(samples)
  for (let s = 0; s < samples; s++) {
    let total = 0
    for (let i = 0; i < diffs.length; i++) total += diffs[Math.floor(random() * diffs.length)] as number
    means[s] = total / diffs.length
  }
  means.sort()
  return [percentile(means, 0.025), percentile(means, 0.975)]
}

/** A small seeded PRNG (mulberry32): the bootstrap must give the same interval for the same trials. */
function mulberry32(seed: number): () => number {
  let a = seed >>> 0
  return () => {
    a = (a + 0x6d2b79f5) >>> 0
    let t = a
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}

function percentile(sorted: Float64Array, q: number): number {
  const at = q * (sorted.length - 1)
  const low = Math.floor(at)
  const high = Math.min(low + 1, sorted.length - 1)
  return (sorted[low] as number) + ((sorted[high] as number) - (sorted[low] as number)) * (at - low)
}

function groupBy<T>(items: readonly T[], key: (item: T) => string): Map<string, T[]> {
  const out = new Map<string, T[]>()
  for (const item of items) {
    const k = key(item)
    const list = out.get(k)
    if (list) list.push(item)
    else out.set(k, [item])
  }
  return out
}

const sum = (xs: readonly number[]): number => xs.reduce((a, b) => a + b, 0)
const mean = (xs: readonly number[]): number => (xs.length === 0 ? 0 : sum(xs) / xs.length)
