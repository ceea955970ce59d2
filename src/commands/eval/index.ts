import { chmodSync, mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Command } from 'commander'
import type { CommandEnv } from '../../command-env.js'
import { CtxError, UsageError } from '../../errors.js'
import { checkTask } from '../../eval/check-suite.js'
import type { TaskVerdict } from '../../eval/check-suite.js'
import { demoVariants, planEval } from '../../eval/plan.js'
import { evalJson, runEval } from '../../eval/run-eval.js'
import { readSuite } from '../../eval/suite.js'
import { parseVariant } from '../../eval/variants.js'
import { hiddenPaths } from '../../run/sandbox-setup.js'
import { environmentStore } from '../../workspace/environment/prepare.js'
import { positiveIntArg, stopSignal, stoppedError, withEnv } from '../../command-kit/shared.js'
import { checkEnqueue, runEnqueued, trialCommand } from './enqueue.js'
import { addMake } from './make.js'
import { renderChecks, renderReport, trialLine } from './render.js'
import { byCodeUnits } from '../../text.js'

interface RunOptions {
  variant: string[]
  runs?: number
  concurrency?: number
  demo?: boolean
  workDir?: string
  enqueue?: boolean
  wait: boolean
}

const collect = (value: string, previous: string[]): string[] => [...previous, value]

export function evalCommand(): Command {
  const command = new Command('eval').description('measure models or configurations on a suite of tasks with hidden checks (docs/eval.md)')
  command
    .command('check')
    .description("validate a suite: each task's check must fail on its starting tree and pass with its solution.patch")
    .argument('<suite>', 'a directory of tasks, each with task.yaml and tests/')
    .action(withEnv(checkSuite))
  command
    .command('run')
    .description('run every task of a suite with each variant, then its hidden check; the same command again resumes a stopped eval')
    .argument('[suite]', 'a directory of tasks, each with task.yaml and tests/')
    .option(
      '--variant <name=config>',
      'a config file, or key=value,… (model, provider, max_turns, max_tokens, timeout, max_cost, allow_shell, replay, config); repeatable',
      collect,
      [],
    )
    .option('--runs <n>', 'trials per task and variant (default: 1)', positiveIntArg)
    .option('--concurrency <k>', 'trials at once (default: 1)', positiveIntArg)
    .option('--work-dir <dir>', "where the trials' workspaces go, outside the task tree (default: a directory under the system's temporary directory)")
    .option('--demo', 'the bundled demo suite with its two recorded variants: no key, no network')
    .option(
      '--enqueue',
      'run the trials as fleet jobs (needs fleet.database_url): queues those not queued or finished, waits for them and reports; the same command again collects',
    )
    .option('--no-wait', 'with --enqueue: return once the trials are queued (the same command later collects them)')
    .action(withEnv(runSuite))
  command.addCommand(trialCommand(), { hidden: true })
  addMake(command)
  return command
}

async function checkSuite(ctx: CommandEnv, _opts: object, suite: string): Promise<void> {
  const read = readSuite(suite)
  const scratch = mkdtempSync(join(tmpdir(), 'ctxagent-eval-check-'))
  chmodSync(scratch, 0o711)
  const verdicts: TaskVerdict[] = read.problems.map((p) => ({ task: p.name, ok: false, why: p.why }))
  const stop = stopSignal()
  const abort = new AbortController()
  void stop.stopped.then(() => abort.abort())
  try {
    const places = {
      scratch,
      mirrors: join(scratch, 'mirrors'),
      hidden: [...hiddenPaths(ctx.layout.base, ctx.configSource, ctx.env), suite],
      store: environmentStore(ctx.config, ctx.layout.base),
      signal: abort.signal,
    }
    for (const task of read.tasks) {
      const verdict = await checkTask(task, ctx.config, places)
      // A stop ends the task being checked with no verdict, and the tasks after it are not checked (docs/eval.md#a-stop).
      if (verdict === null || abort.signal.aborted) break
      verdicts.push(verdict)
    }
  } finally {
    stop.dispose()
    rmSync(scratch, { recursive: true, force: true })
  }
  if (abort.signal.aborted) throw stoppedError(stop.which(), 'the check stopped: no verdict on the task it was checking', 'run it again')
  verdicts.sort((a, b) => byCodeUnits(a.task, b.task))
  if (ctx.json) ctx.io.json({ suite, tasks: verdicts })
  else ctx.io.out(renderChecks(verdicts, ctx.io))
  if (verdicts.some((v) => !v.ok))
    throw new CtxError(`${verdicts.filter((v) => !v.ok).length} of ${verdicts.length} task(s) cannot be used`, {
      hint: 'fix them, or leave them out of the suite',
    })
}

async function runSuite(ctx: CommandEnv, opts: RunOptions, suiteArg: string | undefined): Promise<void> {
  if (opts.demo === true && (suiteArg !== undefined || opts.variant.length > 0))
    throw new UsageError('--demo brings its own suite and variants', 'give either --demo, or a suite with --variant')
  if (opts.demo !== true && suiteArg === undefined) throw new UsageError('no suite given', 'give the suite directory, or --demo')
  if (opts.enqueue === true) checkEnqueue(ctx, opts)
  else if (!opts.wait) throw new UsageError('--no-wait goes with --enqueue', 'give --enqueue to run the trials as fleet jobs')
  const demo = opts.demo === true ? demoVariants() : null
  const plan = planEval({
    suite: demo?.suite ?? (suiteArg as string),
    variants: demo?.variants ?? opts.variant.map((v) => parseVariant(v, process.cwd())),
    runs: opts.runs ?? 1,
    base: ctx.layout.base,
    config: ctx.config,
    configFile: ctx.configSource,
    workDir: opts.workDir ?? null,
    env: ctx.env,
    now: ctx.now(),
  })
  for (const p of plan.suite.problems) ctx.io.warn(`task ${p.name} is left out: ${p.why}`)
  if (opts.enqueue === true) return runEnqueued(ctx, plan, opts.wait)
  const stop = stopSignal()
  const abort = new AbortController()
  void stop.stopped.then(() => abort.abort())
  try {
    const report = await runEval({
      spec: plan.spec,
      tasks: plan.suite.tasks,
      pricing: plan.pricing,
      concurrency: opts.concurrency ?? 1,
      layout: ctx.layout,
      config: ctx.config,
      configFile: ctx.configSource,
      workRoot: plan.workRoot,
      hidden: plan.hidden,
      signal: abort.signal,
      onTrial: (trial, done, total) => ctx.io.warn(trialLine(trial, done, total)),
    })
    if (ctx.json) ctx.io.json(evalJson(report))
    else ctx.io.out(renderReport(report, ctx.io))
    if (report.remaining > 0)
      throw stoppedError(stop.which(), `the eval stopped with ${report.remaining} trial(s) not run`, 'run the same command again to run them')
  } finally {
    stop.dispose()
  }
}
