import { Command, Option } from 'commander'
import type { CommandEnv } from '../../command-env.js'
import { fleetDatabaseUrl } from '../../command-env.js'
import { fleetPool } from '../../actions/fleet-db.js'
import { pause, positiveIntArg, stopSignal, stoppedError, withEnv } from '../../command-kit/shared.js'
import { CtxError, UsageError } from '../../errors.js'
import { enqueueTrials, standing } from '../../eval/enqueue-trials.js'
import { fleetTrial } from '../../eval/fleet-trial.js'
import type { EvalPlan } from '../../eval/plan.js'
import { evalJson, reportOf } from '../../eval/run-eval.js'
import { openEval } from '../../eval/store.js'
import { isUuid } from '../../storage/fs/layout.js'
import { renderReport } from './render.js'

// `eval run --enqueue` and the worker's `eval trial` (docs/eval.md#in-the-fleet).

/** How often a waiting `eval run --enqueue` reads its trials' jobs again. */
const LOOK_EVERY_MS = 1000

/** Refuses what --enqueue cannot take (before anything is written): no fleet database, --concurrency, --work-dir. */
export function checkEnqueue(ctx: CommandEnv, opts: { concurrency?: number; workDir?: string }): void {
  if (opts.concurrency !== undefined)
    throw new UsageError('--enqueue and --concurrency do not go together', "the fleet's workers run the trials, as many at once as they have slots")
  if (opts.workDir !== undefined)
    throw new UsageError('--enqueue and --work-dir do not go together', "the workers make the trials' workspaces (in fleet.workspaces_dir when set)")
  if (fleetDatabaseUrl(ctx) === null)
    throw new UsageError("eval run --enqueue needs the fleet's PostgreSQL database", 'set fleet.database_url in the config, or CTXAGENT_DATABASE_URL')
}

/**
 * Queues the eval's trials not queued or recorded yet, one fleet job each, then (unless `wait` is
 * false) waits until every one has ended, and prints the report as `eval run` does. A stop while
 * waiting leaves the jobs queued: the same command collects them later.
 */
export async function runEnqueued(ctx: CommandEnv, plan: EvalPlan, wait: boolean): Promise<void> {
  const { pool } = await fleetPool(ctx, 'eval run --enqueue')
  const stop = stopSignal()
  try {
    const dir = openEval(ctx.layout.base, plan.spec)
    const queued = await enqueueTrials(pool, plan.spec, dir, ctx.osUser, 0)
    if (queued > 0) ctx.io.warn(`${queued} trial(s) queued as fleet jobs (eval ${plan.spec.id})`)
    let now = await standing(pool, plan.spec, dir)
    let said = -1
    while (wait && now.open > 0) {
      if (now.open !== said) ctx.io.warn(`waiting for ${now.open} trial(s) (ctxagent jobs shows them)`)
      said = now.open
      if (!(await pause(LOOK_EVERY_MS, stop.stopped))) break
      now = await standing(pool, plan.spec, dir)
    }
    const report = await reportOf(dir, plan.spec, now.open, now.unjudged)
    if (ctx.json) ctx.io.json(evalJson(report))
    else ctx.io.out(renderReport(report, ctx.io))
    if (report.remaining > 0 && wait)
      throw new CtxError(`stopped waiting with ${report.remaining} trial(s) still queued or running`, {
        exitCode: 130,
        hint: 'they go on in the fleet; run the same command again to collect them',
      })
    if (report.remaining > 0) ctx.io.warn(`${report.remaining} trial(s) still queued or running: run the same command again to collect them`)
  } finally {
    stop.dispose()
    await pool.end().catch(() => undefined)
  }
}

interface TrialOptions {
  task: string
  variant: string
  run: number
  uuid: string
  user?: string
}

/** `eval trial ID …`: what a worker runs for an eval's job (not for operators; hidden from the help). */
export function trialCommand(): Command {
  return new Command('trial')
    .description("one trial of an eval as a fleet job: the worker's child (docs/eval.md#in-the-fleet)")
    .argument('<id>', "the eval's id")
    .requiredOption('--task <name>', 'the task')
    .requiredOption('--variant <name>', 'the variant')
    .requiredOption('--run <n>', 'the run', positiveIntArg)
    .requiredOption('--uuid <uuid>', "the job's task")
    .option('--user <name>', 'whose task it is')
    .addOption(new Option('--log-format <format>', "the agent's log lines on stderr").choices(['json']))
    .action(withEnv(trial))
}

async function trial(ctx: CommandEnv, opts: TrialOptions, id: string): Promise<void> {
  if (!isUuid(opts.uuid)) throw new UsageError(`--uuid ${JSON.stringify(opts.uuid.slice(0, 60))} is not a UUID`, "give the job's task uuid")
  // The worker's SIGTERM reaches the agent too (one process group): it pauses, and this process waits for it, then records no verdict.
  // The check's sandbox is a process group of its own: the stop ends it here (docs/eval.md#a-stop).
  const stop = stopSignal()
  const abort = new AbortController()
  void stop.stopped.then(() => abort.abort())
  try {
    const end = await fleetTrial({
      id,
      task: opts.task,
      variant: opts.variant,
      run: opts.run,
      uuid: opts.uuid,
      user: opts.user ?? null,
      layout: ctx.layout,
      config: ctx.config,
      configFile: ctx.configSource,
      env: ctx.env,
      workspacesDir: ctx.config.fleet.workspaces_dir,
      signal: abort.signal,
    })
    // A check the stop ended: 130/143 with the task ended, which the worker reads as a trial to judge again (docs/eval.md#a-stop).
    if (end.stopped) throw stoppedError(stop.which(), `the check of ${opts.task} was stopped: no verdict`, 'its job judges it when claimed again')
    // The agent's exit code is the job's to read, as a `run`'s would be.
    process.exitCode = end.code ?? 1
  } finally {
    stop.dispose()
  }
}
