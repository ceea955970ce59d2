import { createHash } from 'node:crypto'
import { existsSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { appendShared, readJsonl } from '../storage/format/jsonl.js'
import { makePrivateDir, writeJsonAtomic } from '../storage/fs/files.js'
import type { Trial } from './report.js'

/**
 * An eval in the task tree (docs/eval.md#where-results-live): `evals/<id>/eval.json` (what
 * was asked), `trials.jsonl` (one line per finished trial, appended once it has its
 * verdict), `work/` (each trial's workspace). The id is a hash of what was asked, so the
 * same command finds its eval again and runs only the trials it lacks.
 */
export interface EvalSpec {
  id: string
  suite: string
  created_at: string
  runs: number
  variants: VariantSpec[]
  tasks: string[]
}

/** A variant: a config file and/or `run` flags (model, provider, budgets, a replay directory). */
export interface VariantSpec {
  name: string
  config: string | null
  flags: string[]
  /** With the replay provider: a directory of recordings, `<task>.jsonl` each. */
  replay: string | null
}

export function evalsDir(base: string): string {
  return join(base, 'evals')
}

export function evalId(suite: string, variants: readonly VariantSpec[], runs: number, configTexts: readonly string[]): string {
  const hash = createHash('sha256')
  hash.update(JSON.stringify({ suite, runs, variants, configTexts }))
  return hash.digest('hex').slice(0, 12)
}

/** The eval's directory, made (with eval.json) when it is new; an existing one is kept as it is. */
export function openEval(base: string, spec: EvalSpec): string {
  makePrivateDir(base)
  makePrivateDir(evalsDir(base))
  const dir = join(evalsDir(base), spec.id)
  makePrivateDir(dir)
  if (!existsSync(join(dir, 'eval.json'))) writeJsonAtomic(join(dir, 'eval.json'), spec)
  if (!existsSync(join(dir, 'trials.jsonl'))) writeFileSync(join(dir, 'trials.jsonl'), '', { mode: 0o600, flag: 'a' })
  return dir
}

export function readSpec(dir: string): EvalSpec {
  return JSON.parse(readFileSync(join(dir, 'eval.json'), 'utf8')) as EvalSpec
}

/** The finished trials; a damaged line is counted, not fatal (its trial runs again). */
export async function readTrials(dir: string): Promise<{ trials: Trial[]; bad: number }> {
  const trials: Trial[] = []
  let bad = 0
  for await (const item of readJsonl(join(dir, 'trials.jsonl'))) {
    if (item.ok && typeof item.record.task === 'string' && typeof item.record.variant === 'string') trials.push(item.record as unknown as Trial)
    else bad++
  }
  return { trials, bad }
}

/** Whether the trial has its verdict in the eval's trials.jsonl. */
export async function trialRecorded(dir: string, trial: Pick<Trial, 'task' | 'variant' | 'run'>): Promise<boolean> {
  const key = trialKey(trial)
  return (await readTrials(dir)).trials.some((t) => trialKey(t) === key)
}

export function recordTrial(dir: string, trial: Trial): void {
  appendShared(join(dir, 'trials.jsonl'), trial)
}

/**
 * A trial whose agent has ended but which has no verdict yet (docs/eval.md#a-stop): written before its
 * check runs, so that a stop during the check leaves the task to be judged by the same command
 * again, without running its agent again.
 */
export interface EndedAgent {
  task: string
  variant: string
  run: number
  uuid: string
  status: string
  workspace: string
  /** How long the agent ran: the trial's time is this and its check's. */
  agent_ms: number
}

export function recordEnded(dir: string, ended: EndedAgent): void {
  appendShared(join(dir, 'ended.jsonl'), ended)
}

/** The ended agents by trialKey (the last line of each wins); a damaged line is skipped (its trial runs again). */
export async function readEnded(dir: string): Promise<Map<string, EndedAgent>> {
  const ended = new Map<string, EndedAgent>()
  for await (const item of readJsonl(join(dir, 'ended.jsonl'))) {
    if (!item.ok) continue
    const r = item.record
    if (typeof r.uuid === 'string' && typeof r.workspace === 'string' && typeof r.status === 'string' && typeof r.agent_ms === 'number')
      ended.set(trialKey(r as unknown as EndedAgent), r as unknown as EndedAgent)
  }
  return ended
}

export function trialKey(t: Pick<Trial, 'task' | 'variant' | 'run'>): string {
  return `${t.variant}\u0000${t.task}\u0000${t.run}`
}
