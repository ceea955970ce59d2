import { resolve } from 'node:path'
import { Command, Option } from 'commander'
import type { CommandEnv } from '../../command-env.js'
import { auditTask, withTaskEnv } from '../../command-env.js'
import { CtxError } from '../../errors.js'
import { explainSystemError } from '../../system-errors.js'
import { ensureLayout } from '../../storage/task/lifecycle.js'
import { shellSandbox } from '../../run/sandbox-setup.js'
import type { RunFlags } from '../../run/settings.js'
import { durationArg, positiveIntArg, usdArg, withEnv } from '../../command-kit/shared.js'
import { refuseSpentBudget } from '../../run/budget-start.js'
import { failedOutcome, isRefusal } from './run-failure.js'
import type { Started } from './run-failure.js'
import { outcomeError, plannedWait, renderOutcome } from './run-outcome.js'
import { prepareNew, prepareResume, startingTask } from './run-prepare.js'
import { refuseConfigInWorkspace } from './run-refusals.js'
import { runOptionsProblem } from './run-options.js'
import type { RunOptions } from './run-options.js'

export function runCommand(): Command {
  return (
    new Command('run')
      .description('run an agent task against an LLM (or resume a paused one), writing its task directory')
      .option('--task <text>', 'the task, as text')
      .option('--task-file <file>', 'the task, from a file (- for standard input)')
      .option('--github <owner/repo#N>', 'a GitHub issue or pull request (GITHUB_TOKEN or github.token)')
      .option('--gitlab <group/project#N|!N>', 'a GitLab issue (#N) or merge request (!N) (GITLAB_TOKEN or gitlab.token)')
      .option('--resume <uuid>', 'continue a paused task where it stopped (or last: the newest task)')
      .option('--chat', 'a keep-alive chat session: answer each message sent with ctxagent chat, then wait for the next (--task is an optional first message)')
      .option('--task-id <id>', 'a name for the task; a later task with the same id (and user and workspace) inherits its summary')
      .option('--user <name>', 'whose task this is (default: the OS user); selects users.<name> settings')
      .option('--workspace <dir>', 'the only directory tools may touch (default: the current directory)')
      .addOption(new Option('--provider <name>', 'LLM provider (default: config llm.provider)').choices(['openai', 'anthropic', 'ollama', 'replay']))
      .option('--model <name>', 'model name (default: config llm.<provider>.model)')
      .option('--replay-from <uuid|file>', 'with --provider replay: the recorded task (uuid, directory or messages.jsonl) to play back')
      .option('--max-turns <n>', 'stop as timeout after this many LLM turns (default: run.max_turns, 100)', positiveIntArg)
      .option('--max-tokens <n>', 'stop as timeout after this many tokens in total (default: run.max_tokens, none)', positiveIntArg)
      .option('--timeout <duration>', 'stop as timeout after this much working time, e.g. 30m (default: run.timeout, none)', durationArg('--timeout'))
      .option(
        '--max-cost <usd>',
        'pause (exit 5) before the LLM request that would take the task past this spend in USD, across resumes (default: run.max_cost_usd, none; needs pricing for the model)',
        usdArg,
      )
      .option('--no-wait', "pause (exit 1) at a provider's usage limit instead of waiting until it lifts")
      .option('--allow-shell', 'offer the run_command tool (default: config tools.shell)')
      .option('--no-inherit', "do not start from an earlier task's summary")
      .option('--system-prompt-file <file>', 'replace the built-in system prompt')
      .addOption(
        new Option(
          '--deliver <mode>',
          'when the task completes: none, commit its change on a new branch, or push it and open a pull/merge request (default: deliver.mode; docs/delivery.md)',
        ).choices(['none', 'branch', 'pr']),
      )
      // A fleet worker names the task its job announced (enqueue printed the uuid); not for operators.
      .addOption(new Option('--uuid <uuid>').hideHelp())
      // A review loop's follow-up on a pull request (poll writes it; docs/delivery.md#the-review-loop); not for operators.
      .addOption(new Option('--follow-up-file <file>').hideHelp())
      // An eval's trial names the repository its workspace was made from, for its environment (docs/eval.md#a-trial); not for operators.
      .addOption(new Option('--environment-of <repo>').hideHelp())
      .addOption(new Option('--log-format <format>', 'log lines on stderr (default: text on a terminal, json otherwise)').choices(['text', 'json']))
      .action(withEnv(runLogged))
  )
}

/**
 * In JSON log mode (the default off a terminal) every stderr line of a run is one JSON
 * object (docs/contract.md §12.5): warnings, the config notice, and the outcome's last line (paused,
 * timeout, lost, failed). A refusal before any task exists (a usage error) keeps the
 * one-line `ctxagent: …` form of every command (docs/contract.md §9): no log has begun.
 */
async function runLogged(ctx: CommandEnv, opts: RunOptions): Promise<void> {
  const format = opts.logFormat ?? (process.stderr.isTTY ? 'text' : 'json')
  const jsonCtx: CommandEnv = format === 'text' ? ctx : { ...ctx, io: { ...ctx.io, warn: (text) => jsonLine('warn', text) } }
  if (ctx.configNotice !== null) jsonCtx.io.warn(ctx.configNotice)
  const started: Started = { uuid: null }
  try {
    await run(jsonCtx, opts, format, started)
  } catch (err) {
    const failure = explainSystemError(err, ctx.layout.base) ?? err
    if (format === 'text' || isRefusal(failure)) throw failure
    // A failure the loop did not turn into an outcome (a full disk, a task tree gone): still
    // one JSON line on stderr, and with --json one outcome on stdout, as every other ending.
    const e = failure instanceof CtxError ? failure : new CtxError((failure as Error).message ?? String(failure))
    jsonLine('error', e.message, { ...(started.uuid === null ? {} : { uuid: started.uuid }), ...(e.hint ? { hint: e.hint } : {}), exit_code: e.exitCode })
    if (ctx.json) ctx.io.json(failedOutcome(ctx, started.uuid, e))
    throw new CtxError(e.message, { exitCode: e.exitCode, logged: true })
  }
}

function jsonLine(level: string, msg: string, fields: Record<string, unknown> = {}): void {
  process.stderr.write(`${JSON.stringify({ ts: new Date().toISOString(), level, msg, ...fields })}\n`)
}

async function run(ctx: CommandEnv, opts: RunOptions, logFormat: 'text' | 'json', started: Started): Promise<void> {
  const problem = runOptionsProblem(opts)
  if (problem !== null) throw problem
  const flags: RunFlags = opts
  const prepared = opts.resume !== undefined ? await prepareResume(ctx, flags, opts.resume) : await prepareNew(ctx, flags, opts.uuid)
  if (opts.uuid !== undefined && prepared.start.kind === 'new') prepared.start.uuid = opts.uuid.toLowerCase()
  const configFile = ctx.configSource === null ? null : resolve(process.cwd(), ctx.configSource)
  refuseConfigInWorkspace(prepared.settings.workspace, configFile)
  // Nothing was written until here: every check above can refuse with the tree untouched.
  const { runTask } = await import('../../run/run-task.js')
  // A shell without a working sandbox is refused before the tree is touched (tools.sandbox: none opts out).
  shellSandbox(prepared.config, prepared.settings.allowShell, [], prepared.settings.workspace)
  // On a terminal, run --chat is the chat itself: typed lines go to the session it serves.
  const here = opts.chat === true && process.stdin.isTTY === true && process.stdout.isTTY === true ? (await import('./chat-here.js')).chatHere : null
  let stopChat = () => undefined as void
  ensureLayout({ layout: ctx.layout, config: prepared.config, index: null, now: () => ctx.now(), warn: (m) => ctx.io.warn(m) })
  const outcome = await withTaskEnv(
    ctx,
    async (env) => {
      // A cost cap already spent: refused before the task is created or moved (exit 5).
      await refuseSpentBudget(env.index, prepared.config, startingTask(prepared, ctx), ctx.now())
      return runTask(
        {
          env: { ...env, config: prepared.config },
          config: prepared.config,
          settings: prepared.settings,
          stderr: process.stderr,
          logFormat,
          signals: true,
          fleetJob: ctx.env.CTXAGENT_FLEET_JOB !== undefined,
          configFile,
          // Written at start: a run killed with SIGKILL still left its line.
          onStarted: (uuid) => {
            started.uuid = uuid
            auditTask(ctx, 'run', uuid, { event: 'start' })
            if (here) stopChat = here(ctx, uuid)
          },
        },
        prepared.start,
      )
    },
    // In a fleet, an agent runs on through a database outage: its index rows wait for it.
    { lazyIndex: true },
  ).finally(() => stopChat())
  auditTask(ctx, 'run', outcome.uuid, { event: 'end', detail: outcome.status })
  if (ctx.json) ctx.io.json(outcome)
  else ctx.io.out(renderOutcome(outcome))
  if (outcome.exit_code === 0) return
  const err = outcomeError(outcome, ctx.env.CTXAGENT_FLEET_JOB !== undefined)
  if (logFormat === 'text') throw err
  // A pause until a usage limit lifts or a budget window resets is a planned wait (docs/running.md#waits): an info line
  // with its reason and time, which a worker's log relays as news, not an error. The exit code stays the pause's.
  const wait = plannedWait(outcome)
  const fields = { uuid: outcome.uuid, ...(err.hint ? { hint: err.hint } : {}), exit_code: err.exitCode }
  if (wait !== null)
    jsonLine('info', `task ${outcome.uuid} waits until ${wait.wait_until} (${wait.wait_reason}): ${outcome.error ?? ''}`, { ...fields, ...wait })
  else jsonLine('error', err.message, fields)
  throw new CtxError(err.message, { exitCode: err.exitCode, logged: true })
}
