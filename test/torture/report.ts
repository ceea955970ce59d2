import { appendFileSync, mkdirSync } from 'node:fs'
import { join } from 'node:path'
import { ROOT } from '../helpers/run.js'

/** With CTXAGENT_TORTURE_REPORT set (npm run torture), each suite adds its counts for RELIABILITY.md. */
export function record(suite: string, counts: Record<string, unknown>): void {
  if (!process.env.CTXAGENT_TORTURE_REPORT) return
  const dir = join(ROOT, 'test', 'torture', '.results')
  mkdirSync(dir, { recursive: true })
  appendFileSync(join(dir, 'results.jsonl'), `${JSON.stringify({ suite, ...counts })}\n`)
}
