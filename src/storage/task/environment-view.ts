import type { TaskEnvironment, TestRun } from './state.js'

// state.json's `environment` and `test_run` as readers show them (docs/contract.md §16.3, §16.4): a damaged field shows nothing, never stops a command.

export function environmentOf(state: { environment?: unknown } | null | undefined): TaskEnvironment | null {
  const e = state?.environment
  if (e === null || typeof e !== 'object' || Array.isArray(e)) return null
  const r = e as Record<string, unknown>
  if (r.status !== 'ready' && r.status !== 'setup_failed') return null
  const text = (v: unknown) => (typeof v === 'string' ? v : null)
  const list = (v: unknown) => (Array.isArray(v) ? v.filter((x): x is string => typeof x === 'string') : [])
  const cache = r.cache === 'hit' || r.cache === 'miss' || r.cache === 'failed' ? r.cache : 'none'
  return {
    status: r.status,
    file: text(r.file),
    operator: text(r.operator),
    base: text(r.base) ?? '',
    cache,
    setup_seconds: typeof r.setup_seconds === 'number' ? r.setup_seconds : null,
    restored: list(r.restored),
    kept: list(r.kept),
    test: text(r.test),
    error: text(r.error),
    tail: text(r.tail),
  }
}

export function testRunOf(state: { test_run?: unknown } | null | undefined): TestRun | null {
  const t = state?.test_run
  if (t === null || typeof t !== 'object' || Array.isArray(t)) return null
  const r = t as Record<string, unknown>
  if (typeof r.command !== 'string') return null
  return {
    command: r.command,
    exit_code: typeof r.exit_code === 'number' ? r.exit_code : null,
    timed_out: r.timed_out === true,
    duration_ms: typeof r.duration_ms === 'number' ? r.duration_ms : 0,
    tail: typeof r.tail === 'string' ? r.tail : '',
    at: typeof r.at === 'string' ? r.at : '',
  }
}

/** One line: where the definition came from and what the cache did, or why setup failed. */
export function environmentLine(e: TaskEnvironment): string {
  const from = [e.file, e.operator === null ? null : `environments.${e.operator}`].filter((x) => x !== null).join(' + ') || '-'
  if (e.status === 'setup_failed') return `setup failed: ${e.error ?? 'unknown'} (${from})`
  const cache = e.cache === 'none' ? 'no setup' : `cache ${e.cache}${e.setup_seconds !== null ? `, setup ${e.setup_seconds}s` : ''}`
  return `${from}; ${cache}${e.restored.length > 0 ? `; restored ${e.restored.join(', ')}` : ''}`
}

/** `npm test`: exit 0 (1.2s), or timed out. */
export function testRunLine(t: TestRun): string {
  const how = t.timed_out ? 'timed out' : `exit ${t.exit_code ?? 'unknown'}`
  return `\`${t.command}\`: ${how} (${(t.duration_ms / 1000).toFixed(1)}s)`
}
