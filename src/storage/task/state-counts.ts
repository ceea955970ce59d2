/**
 * The counters of a state.json, made whole numbers an index can hold, whoever wrote
 * the file: a version that believed an LLM server's usage figures wrote negative
 * counts, fractions, strings, 1e20 (past PostgreSQL's bigint) and null (1e308 summed
 * to Infinity, which JSON writes as null). One such task must not stop `reindex`,
 * `stats`, `/metrics` or `serve` (docs/security.md#usage-figures-from-the-server): a
 * figure that is not a whole number from 0 to 2^53 is taken as 0, or left out where
 * the field may be absent, and what was changed is kept for the reader to report.
 */

/** Counters every state.json has (absent: 0). */
const REQUIRED = ['llm_call_count', 'tool_call_count', 'total_tokens_used', 'current_context_tokens', 'compression_count'] as const
/** Counters a state.json may lack (absent: unknown, or counted another way). */
const OPTIONAL = ['prompt_tokens', 'completion_tokens', 'cached_tokens', 'cache_write_tokens', 'message_count', 'turns', 'elapsed_ms'] as const
/** Runs of requests apart from the turns, each with these counters. */
const REQUESTS = ['final_summary_tokens', 'compaction_tokens'] as const
const REQUEST_FIELDS = ['requests', 'prompt_tokens', 'completion_tokens', 'cached_tokens'] as const

export function isCount(value: unknown): value is number {
  return typeof value === 'number' && Number.isSafeInteger(value) && value >= 0
}

/** A figure as said in a report: short, whatever it is. */
function shown(value: unknown): string {
  const text = typeof value === 'string' ? JSON.stringify(value) : String(value)
  return text.length > 24 ? `${text.slice(0, 24)}…` : text
}

/**
 * Makes the counters of `state` (a parsed state.json, defaults merged under it) whole
 * numbers, in place; returns what was changed ("total_tokens_used null → 0"), empty when
 * nothing was. total_tokens_used that is not one is the split's sum where that is sound.
 */
export function cleanCounts(state: Record<string, unknown>): string[] {
  const changed: string[] = []
  for (const key of OPTIONAL) {
    if (!(key in state) || state[key] === undefined || isCount(state[key])) continue
    changed.push(`${key} ${shown(state[key])} → absent`)
    delete state[key]
  }
  for (const key of REQUIRED) {
    if (isCount(state[key])) continue
    const split =
      key === 'total_tokens_used' && isCount(state.prompt_tokens) && isCount(state.completion_tokens) ? state.prompt_tokens + state.completion_tokens : 0
    const fixed = Number.isSafeInteger(split) ? split : 0
    changed.push(`${key} ${shown(state[key])} → ${fixed}`)
    state[key] = fixed
  }
  for (const key of REQUESTS) {
    const run = state[key]
    if (run === undefined) continue
    if (run === null || typeof run !== 'object' || Array.isArray(run)) {
      changed.push(`${key} ${shown(run)} → absent`)
      delete state[key]
      continue
    }
    const fields = run as Record<string, unknown>
    if (REQUEST_FIELDS.every((f) => isCount(fields[f]))) continue
    const clean: Record<string, number> = {}
    for (const f of REQUEST_FIELDS) {
      clean[f] = isCount(fields[f]) ? fields[f] : 0
      if (!isCount(fields[f])) changed.push(`${key}.${f} ${shown(fields[f])} → 0`)
    }
    state[key] = clean
  }
  return changed
}
