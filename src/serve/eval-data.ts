import { existsSync, readdirSync } from 'node:fs'
import { join } from 'node:path'
import { reportOf } from '../eval/run-eval.js'
import type { EvalReport } from '../eval/run-eval.js'
import type { Trial } from '../eval/report.js'
import { evalsDir, readSpec, readTrials, trialKey } from '../eval/store.js'
import type { EvalSpec } from '../eval/store.js'
import { NotFoundError } from '../errors.js'
import type { FleetSource } from './fleet-data.js'
import { byCodeUnits } from '../text.js'

/** Where an eval's fleet jobs are read (none without a fleet): their trials that ended without a verdict are shown as `eval run` shows them. */
type Jobs = Pick<FleetSource, 'evalStanding'> | null

/** An eval's id as `eval run` makes it (docs/eval.md#where-results-live): the page resolves nothing else. */
const EVAL_ID = /^[0-9a-f]{12}$/

/** The evals listed, newest first; the rest are still in the tree. */
const LISTED = 100

export type ListedEval = { id: string; report: EvalReport; spec: EvalSpec } | { id: string; error: string }

/**
 * The evals of the tree, each read by the code `eval run --json` reports with (`reportOf`):
 * one that cannot be read is listed with why, the others all the same.
 */
export async function listEvals(base: string, jobs: Jobs): Promise<ListedEval[]> {
  const dir = evalsDir(base)
  if (!existsSync(dir)) return []
  const listed: ListedEval[] = []
  for (const id of readdirSync(dir).filter((name) => EVAL_ID.test(name))) {
    try {
      listed.push({ id, ...(await readEval(base, id, jobs)) })
    } catch (err) {
      listed.push({ id, error: (err as Error).message })
    }
  }
  const at = (e: ListedEval) => ('spec' in e ? e.spec.created_at : '')
  return listed.sort((a, b) => byCodeUnits(at(b), at(a)) || byCodeUnits(a.id, b.id)).slice(0, LISTED)
}

/**
 * One eval's report, as `eval run --json` gives it: its recorded trials, and with a fleet
 * the trials whose jobs ended without a verdict (cancelled, failed, done unjudged), which
 * are then not counted as not run. A fleet that cannot be read leaves the recorded ones.
 */
export async function readEval(base: string, id: string, jobs: Jobs): Promise<{ report: EvalReport; spec: EvalSpec }> {
  const dir = join(evalsDir(base), id)
  if (!EVAL_ID.test(id) || !existsSync(join(dir, 'eval.json'))) throw new NotFoundError(`no eval ${id.slice(0, 40)}`, 'see /evals for the evals of this tree')
  const spec = readSpec(dir)
  const unjudged = (await jobs?.evalStanding(spec, dir).catch(() => null))?.unjudged ?? []
  // trials.jsonl read once for both the count of trials not run and the report.
  const read = await readTrials(dir)
  return { report: await reportOf(dir, spec, notRun(read.trials, spec) - unjudged.length, unjudged, read), spec }
}

/** Trials the eval asked for that have no verdict yet (a stopped eval: the same command runs them). */
function notRun(trials: readonly Trial[], spec: EvalSpec): number {
  const asked = new Set(
    spec.variants.flatMap((v) => spec.tasks.flatMap((task) => Array.from({ length: spec.runs }, (_, i) => trialKey({ variant: v.name, task, run: i + 1 })))),
  )
  const have = new Set(trials.map(trialKey).filter((k) => asked.has(k)))
  return asked.size - have.size
}
