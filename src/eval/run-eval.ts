import { join } from 'node:path'
import type { Config } from '../config/schema.js'
import type { Layout } from '../storage/fs/layout.js'
import { pairedReport, variantReport } from './report.js'
import type { PairedReport, Trial, VariantReport } from './report.js'
import { openEval, readEnded, readTrials, recordTrial, trialKey } from './store.js'
import type { EvalSpec, VariantSpec } from './store.js'
import type { EvalTask } from './suite.js'
import { runTrial } from './trial.js'

export interface EvalRunInput {
  spec: EvalSpec
  tasks: EvalTask[]
  /** Each variant's pricing (its config's), for the trials' cost. */
  pricing: Map<string, Config['pricing']>
  concurrency: number
  layout: Layout
  config: Config
  configFile: string | null
  workRoot: string
  hidden: readonly string[]
  signal: AbortSignal
  /** Told as each trial ends (for progress lines). */
  onTrial?: (trial: Trial, done: number, total: number) => void
}

export interface EvalReport {
  id: string
  suite: string
  dir: string
  runs: number
  tasks: string[]
  variants: (VariantReport & { trials_list: Trial[] })[]
  /** Each later variant against the first, over the same tasks. */
  paired: PairedReport[]
  /** Trials not run yet (the eval was stopped): a later run of the same command runs them. */
  remaining: number
  /** Lines of trials.jsonl that could not be read (their trials run again). */
  bad_lines: number
}

/**
 * Runs the trials the eval lacks, `concurrency` at a time, each recorded as it ends, then
 * reports on all of them (docs/eval.md). Stopping (the signal) lets the running trials'
 * agents pause, ends their checks at once and records none of them: the same command runs
 * them again, a trial whose agent had ended only its check (docs/eval.md#a-stop).
 */
export async function runEval(input: EvalRunInput): Promise<EvalReport> {
  const dir = openEval(input.layout.base, input.spec)
  const { trials: done } = await readTrials(dir)
  const have = new Set(done.map(trialKey))
  // Trials whose agent ended but whose check a stop cut short: judged now, their agents not run again (docs/eval.md#a-stop).
  const ended = await readEnded(dir)
  const todo: { task: EvalTask; variant: VariantSpec; run: number }[] = []
  for (const variant of input.spec.variants)
    for (const task of input.tasks)
      for (let run = 1; run <= input.spec.runs; run++)
        if (!have.has(trialKey({ task: task.name, variant: variant.name, run }))) todo.push({ task, variant, run })
  const total = todo.length
  let finished = 0
  const worker = async (): Promise<void> => {
    for (let next = todo.shift(); next !== undefined && !input.signal.aborted; next = todo.shift()) {
      const trial = await runTrial(
        {
          ...next,
          workRoot: input.workRoot,
          mirrors: join(dir, 'mirrors'),
          layout: input.layout,
          config: input.config,
          configFile: input.configFile,
          pricing: input.pricing.get(next.variant.name) ?? input.config.pricing,
          hidden: input.hidden,
          signal: input.signal,
        },
        dir,
        ended.get(trialKey({ task: next.task.name, variant: next.variant.name, run: next.run })),
      )
      if (trial === null || input.signal.aborted) return
      recordTrial(dir, trial)
      input.onTrial?.(trial, ++finished, total)
    }
  }
  await Promise.all(Array.from({ length: Math.max(1, Math.min(input.concurrency, total)) }, worker))
  return reportOf(dir, input.spec, total - finished)
}

/**
 * The report of an eval's recorded trials (also for `eval report` of a finished or stopped eval).
 * `unjudged`: trials whose fleet job ended without a verdict (docs/eval.md#in-the-fleet), listed with
 * their status but in no figure: no verdict on the variant.
 */
export async function reportOf(
  dir: string,
  spec: EvalSpec,
  remaining: number,
  unjudged: readonly Trial[] = [],
  read?: Awaited<ReturnType<typeof readTrials>>,
): Promise<EvalReport> {
  const { trials, bad } = read ?? (await readTrials(dir))
  const names = new Set(spec.tasks)
  const mine = trials.filter((t) => names.has(t.task))
  const variants = spec.variants.map((v) => ({
    ...variantReport(v.name, mine),
    trials_list: [...mine, ...unjudged].filter((t) => t.variant === v.name),
  }))
  const first = spec.variants[0]?.name
  const seed = Number.parseInt(spec.id.slice(0, 8), 16)
  const paired = first === undefined ? [] : spec.variants.slice(1).flatMap((v) => pairedReport(v.name, first, mine, seed) ?? [])
  return { id: spec.id, suite: spec.suite, dir, runs: spec.runs, tasks: spec.tasks, variants, paired, remaining, bad_lines: bad }
}

/** `eval run --json`'s document (docs/eval.md#the-report), from the same report. */
export function evalJson(report: EvalReport) {
  return {
    id: report.id,
    suite: report.suite,
    dir: report.dir,
    runs: report.runs,
    tasks: report.tasks,
    remaining: report.remaining,
    variants: report.variants.map(({ trials_list, ...v }) => ({ ...v, trials: trials_list })),
    paired: report.paired,
  }
}
