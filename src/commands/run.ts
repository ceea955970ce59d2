import { existsSync } from 'node:fs'
import { basename, resolve } from 'node:path'
import { Command, InvalidArgumentError, Option } from 'commander'
import type { CommandEnv } from '../command-env.js'
import { auditTask, withTaskEnv } from '../command-env.js'
import { CtxError, LockedError, resumeRaceLost, UsageError } from '../errors.js'
import { explainSystemError } from '../system-errors.js'
import { assertRegularFiles } from '../storage/fs/files.js'
import { isUuid, resolveTask, TASK_DATA_FILES } from '../storage/fs/layout.js'
import { VANISHED } from '../storage/lock/lock.js'
import type { TaskRef } from '../storage/fs/layout.js'
import { assessTask } from '../operations/reaper.js'
import { stalenessPolicy } from '../storage/task/env.js'
import { readMetadata } from '../storage/task/metadata.js'
import type { TaskKey } from '../storage/task/metadata.js'
import { readState } from '../storage/task/state.js'
import type { TaskState } from '../storage/task/state.js'
import type { Channel, RemoteTask } from '../sources/types.js'
import { ensureLayout, resumableFromCompleted } from '../storage/task/lifecycle.js'
import type { Outcome } from '../run/outcome.js'
import type { RunStart } from '../run/run-start.js'
import { shellSandbox } from '../run/sandbox-setup.js'
import { checkProvider, effectiveConfig, newRunSettings, readTextArg, refuseTreeInWorkspace, resumedRunSettings } from '../run/settings.js'
import type { RunFlags, RunSettings } from '../run/settings.js'
import { durationArg, positiveIntArg, withEnv } from './shared.js'
import { refuseSpentBudget } from '../run/budget-start.js'
import { activeEndpoint } from '../config/endpoint.js'
import { forTerminal } from '../terminal-text.js'
import { readStdinText } from '../input-file.js'
import { grouped, isPrintableName, NAME_RULE, shortPath } from '../text.js'
import { failedOutcome, isRefusal } from './run-failure.js'
import type { Started } from './run-failure.js'
import { inside, realPathOf } from '../tools/workspace.js'

interface RunOptions extends Omit<RunFlags, 'inherit'> {
  inherit: boolean
  uuid?: string
}

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
  const given = [opts.task, opts.taskFile, opts.resume, opts.github, opts.gitlab].filter((x) => x !== undefined).length
  if (given === 0 && !opts.chat)
    throw new UsageError(
      'no task given',
      'pass --task TEXT, --task-file FILE (- for standard input), --github owner/repo#N, --gitlab group/project#N or --resume <uuid>, or start a --chat',
    )
  if (given > 1) throw new UsageError('--task, --task-file, --github, --gitlab and --resume exclude each other', 'give one of them')
  if (opts.chat && (opts.github !== undefined || opts.gitlab !== undefined))
    throw new UsageError('--chat starts a local session; it excludes --github and --gitlab', 'give one of them')
  if (opts.chat && opts.resume !== undefined) throw new UsageError('--chat starts a new session; a resumed chat task stays a chat', 'drop --chat')
  if (opts.deliver !== undefined && opts.resume !== undefined)
    throw new UsageError('--deliver is chosen when a task starts; a resumed task delivers as it was started to', 'drop --deliver')
  const flags: RunFlags = opts
  if (opts.followUpFile !== undefined && opts.github === undefined && opts.gitlab === undefined)
    throw new UsageError('--follow-up-file follows up a pull or merge request', 'give --github or --gitlab too')
  if (opts.uuid !== undefined && (opts.resume !== undefined || !isUuid(opts.uuid)))
    throw new UsageError('--uuid names a new task and must be a uuid', 'drop --uuid')
  const prepared = opts.resume !== undefined ? await prepareResume(ctx, flags, opts.resume) : await prepareNew(ctx, flags, opts.uuid)
  if (opts.uuid !== undefined && prepared.start.kind === 'new') prepared.start.uuid = opts.uuid.toLowerCase()
  const configFile = ctx.configSource === null ? null : resolve(process.cwd(), ctx.configSource)
  refuseConfigInWorkspace(prepared.settings.workspace, configFile)
  // Nothing was written until here: every check above can refuse with the tree untouched.
  const { runTask } = await import('../run/run-task.js')
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
  jsonLine('error', err.message, { uuid: outcome.uuid, ...(err.hint ? { hint: err.hint } : {}), exit_code: err.exitCode })
  throw new CtxError(err.message, { exitCode: err.exitCode, logged: true })
}

/** The task about to start, as the cost caps see it. */
function startingTask(prepared: Prepared, ctx: CommandEnv): Parameters<typeof refuseSpentBudget>[2] {
  const { start, config, settings } = prepared
  const model = activeEndpoint(config).model
  if (start.kind === 'new') return { user: start.user, model, state: null, uuid: null, maxCostUsd: settings.maxCostUsd }
  // The directory gone meanwhile: another process resumed it first (a lost race, exit 4), as in prepareResume.
  const meta = stillThere(start.ref, () => readMetadata(start.ref.dir))
  return { user: meta.user ?? ctx.osUser, model, state: readStateOrNull(start.ref.dir), uuid: start.ref.uuid, maxCostUsd: settings.maxCostUsd }
}

/** --max-cost: an amount in USD above 0. */
function usdArg(value: string): number {
  const n = Number(value)
  if (!/^\s*\d+(\.\d+)?\s*$/.test(value) || !(n > 0)) throw new InvalidArgumentError('must be an amount in USD above 0, like 2.50')
  return n
}

/**
 * A config file inside the workspace is one the model could rewrite, MCP server commands
 * included, for the next command that reads it (docs/contract.md §8): refused, by real paths.
 */
function refuseConfigInWorkspace(workspace: string, configFile: string | null): void {
  if (configFile === null) return
  const [ws, file] = [realPathOf(workspace), realPathOf(configFile)]
  if (!inside(ws, file)) return
  throw new UsageError(
    `the config file ${shortPath(file)} is inside the workspace ${shortPath(ws)}, where the agent could rewrite it`,
    'keep the config outside the workspace (~/.config/ctxagent/config.yaml, /etc/ctxagent/config.yaml, or --config elsewhere)',
  )
}

interface Prepared {
  config: CommandEnv['config']
  settings: RunSettings
  start: RunStart
}

async function prepareNew(ctx: CommandEnv, flags: RunFlags, uuid: string | undefined): Promise<Prepared> {
  if (flags.github !== undefined || flags.gitlab !== undefined) return prepareRemote(ctx, flags, uuid)
  const text =
    flags.task ??
    (flags.taskFile === undefined ? '' : readTextArg(flags.taskFile, 'task file', () => readStdinText('task file', 'give a task of at most 1 MB')))
  if (text.trim() === '' && !flags.chat) throw new UsageError('the task is empty', 'describe what the agent should do')
  const taskId = flags.taskId === undefined ? '' : checkName(flags.taskId, '--task-id')
  const { user, config, settings } = await settingsFor(ctx, flags)
  const key = { task_source: 'local', owner: null, repo: basename(settings.workspace), task_type: flags.chat ? 'chat' : 'task', task_id: taskId }
  return { config, settings, start: { kind: 'new', source: { key, text }, user } }
}

/** The user, the config as that user's task sees it, and the run settings of a new task: all checked, nothing written. */
async function settingsFor(ctx: CommandEnv, flags: RunFlags): Promise<{ user: string; config: CommandEnv['config']; settings: RunSettings }> {
  const user = checkName(flags.user ?? ctx.osUser, '--user')
  const config = effectiveConfig(ctx.config, user, flags)
  checkProvider(config)
  const settings = newRunSettings(config, { ...flags, user }, process.cwd())
  refuseTreeInWorkspace(settings.workspace, ctx.layout.base)
  if (settings.systemPromptFile) readTextArg(settings.systemPromptFile, 'system prompt file')
  await checkRecording(ctx, config)
  return { user, config, settings }
}

/** A GitHub or GitLab task: checked, fetched and composed before the task is written (a bad token writes nothing). */
async function prepareRemote(ctx: CommandEnv, flags: RunFlags, uuid: string | undefined): Promise<Prepared> {
  const load = flags.github !== undefined ? await githubLoader(flags.github) : await gitlabLoader(flags.gitlab as string)
  const followUp =
    flags.followUpFile === undefined
      ? null
      : readTextArg(flags.followUpFile, 'follow-up file', () => readStdinText('follow-up file', 'give a statement of at most 1 MB'))
  const { user, config, settings } = await settingsFor(ctx, flags)
  const task = await load(config)
  // A pull request: its head branch checked out (a worktree, or the fleet's clone), and the task that opened it.
  const opener = task.pull ? await (await import('./run-pull.js')).placeOnPull(ctx, config, settings, task, uuid) : null
  // On the head branch of a request ctxagent opened, the change goes back as one more commit there, unless --deliver says otherwise.
  if (opener !== null && settings.prHead && flags.deliver === undefined) settings.deliver = 'pr'
  const text = followUp === null ? task.text : `${task.text}\n\n${followUp.trim()}`
  return {
    config,
    settings,
    start: { kind: 'new', source: { key: task.key, text, ...(opener ? { opener } : {}) }, user, channel: task.channel, seen: task.seen },
  }
}

/** The reference checked now (a usage error writes nothing), the fetch later; the clients load only when used. */
async function githubLoader(spec: string): Promise<(config: CommandEnv['config']) => Promise<RemoteTask>> {
  const { parseGithubRef, loadGithubTask } = await import('../sources/github.js')
  const ref = parseGithubRef(spec)
  return (config) => loadGithubTask(config, ref)
}

async function gitlabLoader(spec: string): Promise<(config: CommandEnv['config']) => Promise<RemoteTask>> {
  const { parseGitlabRef, loadGitlabTask } = await import('../sources/gitlab.js')
  const ref = parseGitlabRef(spec)
  return (config) => loadGitlabTask(config, ref)
}

/** The channel of a resumed task that came from GitHub or GitLab, found again from its key. */
async function channelOf(config: CommandEnv['config'], key: TaskKey): Promise<Channel | undefined> {
  if (key.owner === null) return undefined
  if (key.task_source === 'github') {
    const { githubChannelFor } = await import('../sources/github.js')
    return githubChannelFor(config, { owner: key.owner, repo: key.repo, number: Number(key.task_id) })
  }
  if (key.task_source === 'gitlab') {
    const { gitlabChannelFor } = await import('../sources/gitlab.js')
    return gitlabChannelFor(config, {
      project: `${key.owner}/${key.repo}`,
      kind: key.task_type === 'merge_request' ? 'merge_request' : 'issue',
      iid: Number(key.task_id),
    })
  }
  return undefined
}

/**
 * Reads of a task about to be resumed: when they fail because its directory moved away
 * meanwhile, another process resumed it first (a lost race, exit 4), not a damaged task.
 */
function stillThere<T>(ref: TaskRef, read: () => T): T {
  try {
    return read()
  } catch (err) {
    if (existsSync(ref.dir)) throw err
    throw resumeRaceLost(ref.uuid)
  }
}

async function prepareResume(ctx: CommandEnv, flags: RunFlags, id: string): Promise<Prepared> {
  if (flags.taskId !== undefined) throw new UsageError('--task-id names a new task; a resumed task keeps its own', 'drop --task-id')
  const ref = resolveTask(ctx.layout, id)
  if (ref.location === 'running') await refuseLive(ctx, ref)
  // A task a budget stopped, or whose agent died (recovery: fail), continues from completed/ (docs/running.md#recovery-on-one-host).
  const continuable = ref.location === 'completed' && resumableFromCompleted(readStateOrNull(ref.dir))
  if (ref.location === 'completed' && !continuable)
    throw new CtxError(`task ${ref.uuid} is finished (in completed/)`, { exitCode: 4, hint: finishedHint(readMetadata(ref.dir).task_key) })
  const meta = stillThere(ref, () => {
    assertRegularFiles(ref.dir, TASK_DATA_FILES)
    return readMetadata(ref.dir)
  })
  const user = meta.user ?? ctx.osUser
  const recorded = meta.config.llm_provider
  const sameProvider = flags.provider === undefined || flags.provider === recorded
  const config = effectiveConfig(ctx.config, user, {
    ...flags,
    ...(flags.provider === undefined && ['openai', 'anthropic', 'ollama', 'replay'].includes(recorded) ? { provider: recorded } : {}),
    ...(flags.model === undefined && sameProvider && recorded !== 'replay' && meta.config.model ? { model: meta.config.model } : {}),
    ...(flags.replayFrom === undefined && sameProvider && meta.run?.replay_from ? { replayFrom: meta.run.replay_from } : {}),
  })
  checkProvider(config)
  await checkRecording(ctx, config)
  const settings = resumedRunSettings(config, meta.run, flags, meta.user, process.cwd())
  refuseTreeInWorkspace(settings.workspace, ctx.layout.base)
  // Budgets count across resumes: a task that used one up continues only with it raised.
  const spent = spentBudget(settings, readStateOrNull(ref.dir))
  if (spent !== null)
    throw new UsageError(
      `task ${ref.uuid} has used its ${spent.budget} budget (${spent.used})`,
      `raise it to continue: ctxagent run --resume ${ref.uuid.slice(0, 8)} ${spent.flag}`,
    )
  const channel = await channelOf(config, meta.task_key)
  return { config, settings, start: { kind: 'resume', ref, ...(channel ? { channel } : {}) } }
}

/**
 * A task in running/ is resumed only when its agent is provably dead (kill -9, a double
 * Ctrl-C, a crashed host); on this host a pid that is gone is proof enough (an
 * operator's request), and the takeover is said in one line.
 */
async function refuseLive(ctx: CommandEnv, ref: TaskRef): Promise<void> {
  await withTaskEnv(
    ctx,
    async (env) => {
      const assessment = assessTask(env, ref, { policy: { ...stalenessPolicy(ctx.config), deadPidIsProof: true } })
      // Moved out of running/ while we looked (its owner finished or paused it): a lost race, as in stillThere.
      if (!existsSync(ref.dir)) throw resumeRaceLost(ref.uuid)
      if (assessment.stale) {
        ctx.io.warn(`task ${ref.uuid} is in running/ but ${assessment.verdict.reason}; resume takes it over`)
        return
      }
      const who = assessment.holder ? `pid ${assessment.holder.process_id} on ${assessment.holder.hostname}` : 'its agent'
      throw new LockedError(`task ${ref.uuid} is running (${who}: ${assessment.reason})`, 'pause it first with ctxagent pause, or wait for it to finish')
    },
    { createIndex: false },
  )
}

function readStateOrNull(dir: string): TaskState | null {
  try {
    return readState(dir)
  } catch {
    return null
  }
}

/** Which budget the task has already used up with these settings, if any, and the flag that raises it. */
function spentBudget(settings: RunSettings, state: TaskState | null): { budget: string; used: string; flag: string } | null {
  if (state === null) return null
  const turns = state.turns ?? 0
  if (turns >= settings.maxTurns)
    return { budget: 'max_turns', used: `${turns} of ${settings.maxTurns} turns`, flag: `--max-turns ${turns + Math.max(10, settings.maxTurns)}` }
  const tokens = state.total_tokens_used ?? 0
  if (settings.maxTokens !== null && tokens >= settings.maxTokens)
    return { budget: 'max_tokens', used: `${tokens} of ${settings.maxTokens} tokens`, flag: `--max-tokens ${tokens + settings.maxTokens}` }
  const elapsed = state.elapsed_ms ?? 0
  if (settings.timeoutMs !== null && elapsed >= settings.timeoutMs)
    return {
      budget: 'timeout',
      used: `${Math.round(elapsed / 1000)}s of ${Math.round(settings.timeoutMs / 1000)}s`,
      flag: `--timeout ${Math.ceil((elapsed + settings.timeoutMs) / 60_000)}m`,
    }
  return null
}

/** What to do with a finished task: a local one without a key cannot be inherited from. */
function finishedHint(key: TaskKey): string {
  if (key.task_source === 'local' && !key.task_id)
    return 'start a new task (it has no --task-id, so nothing inherits from it; see ctxagent view for its summary)'
  return 'start a new task with the same task key (--task-id, or the same issue) to continue from its summary'
}

async function checkRecording(ctx: CommandEnv, config: CommandEnv['config']): Promise<void> {
  if (config.llm.provider !== 'replay') return
  const { checkRecordingPlays } = await import('../llm/replay.js')
  await checkRecordingPlays(config.llm.replay.from as string, ctx.layout)
}

/** A user or task id: one line of printable text, short enough to be a name. */
function checkName(value: string, what: string): string {
  const trimmed = value.trim()
  if (!isPrintableName(trimmed)) {
    throw new UsageError(`${what} must be ${NAME_RULE}`, `give a shorter ${what.slice(2)}`)
  }
  return trimmed
}

function renderOutcome(o: Outcome): string {
  const seconds = (o.duration_ms / 1000).toFixed(1)
  const lines = [
    `task ${o.uuid} ${o.status}${o.finish_status === 'blocked' ? ' (blocked)' : ''} after ${o.turns} turn(s), ${grouped(o.tokens)} tokens, ${seconds}s`,
  ]
  if (o.inherited_from) lines.push(`inherited from: ${o.inherited_from}`)
  // The answer and the reason are the model's and the server's words: no escape sequence of theirs reaches a terminal.
  if (o.final_answer) lines.push('', forTerminal(o.final_answer.trim()), '')
  if (o.error) lines.push(`reason: ${forTerminal(o.error)}`)
  if (o.status !== 'lost') lines.push(`files: ${o.dir}`)
  if (o.status === 'paused') lines.push(`resume: ctxagent run --resume ${o.uuid}`)
  if (o.status === 'timeout') lines.push(`continue: ctxagent run --resume ${o.uuid} --max-turns N (or --max-tokens, --timeout), a budget above what it used`)
  return lines.join('\n')
}

/** `inFleet`: run by a worker, which queues the resume of a task its stop paused and retries a passing LLM failure (docs/contract.md §14.4). */
function outcomeError(o: Outcome, inFleet: boolean): CtxError {
  if (o.status === 'paused') {
    const hint = inFleet
      ? o.exit_code === 1
        ? 'the fleet retries it if the LLM side failed for a while; see ctxagent jobs --task ' + o.uuid.slice(0, 8)
        : 'its worker queued its resume'
      : `resume it with ctxagent run --resume ${o.uuid}`
    return new CtxError(`task ${o.uuid} paused${o.error ? `: ${o.error}` : ''}`, { exitCode: o.exit_code, hint })
  }
  if (o.status === 'timeout')
    return new CtxError(`task ${o.uuid} ran out of budget: ${o.error}`, {
      exitCode: 5,
      hint: `continue it with a raised budget: ctxagent run --resume ${o.uuid.slice(0, 8)} --max-turns N (or --max-tokens, --timeout)`,
    })
  if (o.status === 'lost') {
    const vanished = o.error?.includes(VANISHED) === true
    return new CtxError(`task ${o.uuid}: ${o.error}`, {
      exitCode: 1,
      hint: vanished
        ? 'its files are gone; keep the task tree out of reach of the agent (outside its workspace) and start the task again'
        : 'another process took the task over; this one stopped writing',
    })
  }
  return new CtxError(`task ${o.uuid} failed: ${o.error}`, { exitCode: 1, hint: `see ctxagent view ${o.uuid.slice(0, 8)} --tools` })
}
