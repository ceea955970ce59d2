import { byCodeUnits } from '../text.js'

/** After this many identical calls with identical results, the result says so. */
export const STUCK_WARN_AT = 3
/** After this many, the task fails as stuck. */
export const STUCK_FAIL_AT = 5
/** Malformed calls in a row (unparseable arguments, unknown tool) that fail the task. */
export const MALFORMED_FAIL_AT = 3

export type Verdict = { kind: 'ok' } | { kind: 'warn'; note: string } | { kind: 'stuck'; reason: string } | { kind: 'malformed'; reason: string }

/**
 * The loop breakers of docs/contract.md §12.3, for weak models that repeat themselves: the same
 * call (name + arguments) with the same result several times in a row, or several
 * malformed calls in a row. Holds the last call and its result (which the window holds
 * anyway) and two counters, whatever the task's length.
 */
export class LoopGuard {
  /** The last call as name and arguments, and its result: compared, not hashed (a hash reads the whole result every time; a comparison stops at the first difference, or at the lengths). */
  private last: { call: string; result: string } | null = null
  private repeats = 0
  private malformed = 0

  observe(name: string, args: unknown, result: string, malformed: boolean): Verdict {
    if (malformed) {
      this.malformed++
      this.last = null
      this.repeats = 0
      if (this.malformed >= MALFORMED_FAIL_AT) return { kind: 'malformed', reason: `${this.malformed} malformed tool calls in a row (last: ${name})` }
      return { kind: 'ok' }
    }
    this.malformed = 0
    const call = `${name}\0${stableJson(args)}`
    this.repeats = this.last !== null && this.last.call === call && this.last.result === result ? this.repeats + 1 : 1
    this.last = { call, result }
    if (this.repeats >= STUCK_FAIL_AT)
      return { kind: 'stuck', reason: `stuck: ${name} called ${this.repeats} times in a row with the same arguments and the same result` }
    if (this.repeats >= STUCK_WARN_AT) {
      return {
        kind: 'warn',
        note: `[ctxagent: this is call ${this.repeats} of ${name} in a row with the same arguments and the same result. Repeating it will not change the result: try something else, or call finish with status "blocked". At ${STUCK_FAIL_AT} the task is stopped as stuck.]`,
      }
    }
    return { kind: 'ok' }
  }
}

/** JSON with object keys sorted, so that `{a,b}` and `{b,a}` count as the same arguments. */
function stableJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(stableJson).join(',')}]`
  if (value !== null && typeof value === 'object') {
    const entries = Object.entries(value as Record<string, unknown>).sort(([a], [b]) => byCodeUnits(a, b))
    return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${stableJson(v)}`).join(',')}}`
  }
  return JSON.stringify(value) ?? 'null'
}
