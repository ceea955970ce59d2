import type { RE2JS } from 're2js'

let loading: Promise<typeof RE2JS> | undefined

/**
 * RE2JS.compile, with re2js (~270 KB of code) loaded by the first tool call that takes a
 * regular expression, not by every run's start-up (BENCHMARKS.md, start-run).
 */
export async function compileRe2(pattern: string): Promise<RE2JS> {
  const engine = await (loading ??= import('re2js').then((m) => m.RE2JS))
  return engine.compile(pattern)
}
