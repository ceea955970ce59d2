/*
 * The repositories' environments in the index's counters (docs/environments.md#what-is-counted):
 * each task row's cache result (hit, miss, failed) and its setup's time, summed per user and
 * model by the totals' triggers (totals.ts) as the other counters are, so /metrics'
 * ctxagent_env_cache_total and ctxagent_env_setup_seconds never fall (cleanup retires a
 * deleted row's part, reindex keeps it).
 */

/** Upper bounds (seconds) of the setup time histogram's buckets: a second to setup's 30-minute limit. */
export const SETUP_BUCKETS = [1, 5, 15, 30, 60, 120, 300, 600, 1800] as const

/** The row's columns (state.json `environment`: its cache result, its setup's time in ms). */
export const ENV_TASK_COLUMNS = ['env_cache', 'env_setup_ms'] as const

/** The counters: cache results, then the histogram's cumulative buckets, its count and its sum (ms). */
export const ENV_COUNTERS = [
  'env_hit',
  'env_miss',
  'env_failed',
  'setup_le_1',
  'setup_le_5',
  'setup_le_15',
  'setup_le_30',
  'setup_le_60',
  'setup_le_120',
  'setup_le_300',
  'setup_le_600',
  'setup_le_1800',
  'setup_count',
  'setup_ms',
] as const
export type EnvCounter = (typeof ENV_COUNTERS)[number]

/** Each env counter's value for one row (`r`: `NEW.`, `OLD.` or ''); a row without an environment counts 0. */
export function envCounterValues(r: string): Record<EnvCounter, string> {
  const ms = `${r}env_setup_ms`
  const within = (le: number) => `CASE WHEN ${ms} IS NOT NULL AND ${ms} <= ${le * 1000} THEN 1 ELSE 0 END`
  return {
    env_hit: `CASE WHEN ${r}env_cache = 'hit' THEN 1 ELSE 0 END`,
    env_miss: `CASE WHEN ${r}env_cache = 'miss' THEN 1 ELSE 0 END`,
    env_failed: `CASE WHEN ${r}env_cache = 'failed' THEN 1 ELSE 0 END`,
    setup_le_1: within(1),
    setup_le_5: within(5),
    setup_le_15: within(15),
    setup_le_30: within(30),
    setup_le_60: within(60),
    setup_le_120: within(120),
    setup_le_300: within(300),
    setup_le_600: within(600),
    setup_le_1800: within(1800),
    setup_count: `CASE WHEN ${ms} IS NOT NULL THEN 1 ELSE 0 END`,
    setup_ms: `COALESCE(${ms}, 0)`,
  }
}

/** The bucket counter of a bound of SETUP_BUCKETS. */
export function bucketCounter(le: (typeof SETUP_BUCKETS)[number]): EnvCounter {
  return `setup_le_${le}` as EnvCounter
}
