import { readFileSync } from 'node:fs'
import { basename, resolve } from 'node:path'
import { Command, Option } from 'commander'
import type { CommandEnv } from '../command-env.js'
import { auditTask, withTaskEnv } from '../command-env.js'
import { CtxError, LockedError, UsageError } from '../errors.js'
import { assertRegularFiles } from '../storage/fs/files.js'
import { resolveTask, TASK_DATA_FILES } from '../storage/fs/layout.js'
import type { TaskRef } from '../storage/fs/layout.js'
import { assessTask } from '../operations/reaper.js'
import { stalenessPolicy } from '../storage/task/env.js'
import { readMetadata } from '../storage/task/metadata.js'
import type { TaskKey } from '../storage/task/metadata.js'
import type { Channel, RemoteTask } from '../sources/types.js'
import { ensureLayout } from '../storage/task/lifecycle.js'
import type { Outcome, RunStart } from '../run/run-task.js'
import { shellSandbox } from '../run/sandbox-setup.js'
import { checkProvider, effectiveConfig, newRunSettings, readTextArg, resumedRunSettings } from '../run/settings.js'
import type { RunFlags, RunSettings } from '../run/settings.js'
import { durationArg, positiveIntArg, withEnv } from './shared.js'

interface RunOptions extends Omit<RunFlags, 'inherit'> {
  inherit: boolean
}

export function runCommand(): Command {
  return new Command('run')
    .description('run an agent task against an LLM (or resume a paused one), writing its task directory')
    .option('--task <text>', 'the task, as text')
    .option('--task-file <file>', 'the task, from a file (- for standard input)')
    .option('--github <owner/repo#N>', 'a GitHub issue or pull request (GITHUB_TOKEN or github.token)')
    .option('--gitlab <group/project#N|!N>', 'a GitLab issue (#N) or merge request (!N) (GITLAB_TOKEN or gitlab.token)')
    .option('--resume <uuid>', 'continue a paused task where it stopped')
    .option('--chat', 'a keep-alive chat session: answer each message sent with ctxagent chat, then wait for the next (--task is an optional first message)')
    .option('--task-id <id>', 'a name for the task; a later task with the same id (and user and workspace) inherits its summary')
    .option('--user <name>', 'whose task this is (default: the OS user); selects users.<name> settings')
    .option('--workspace <dir>', 'the only directory tools may touch (default: the current directory)')
    .addOption(new Option('--provider <name>', 'LLM provider (default: config llm.provider)').choices(['openai', 'ollama', 'replay']))
    .option('--model <name>', 'model name (default: config llm.<provider>.model)')
    .option('--replay-from <uuid|file>', 'with --provider replay: the recorded task (uuid, directory or messages.jsonl) to play back')
    .option('--max-turns <n>', 'stop as timeout after this many LLM turns (default: run.max_turns, 100)', positiveIntArg)
    .option('--max-tokens <n>', 'stop as timeout after this many tokens in total (default: run.max_tokens, none)', positiveIntArg)
    .option('--timeout <duration>', 'stop as timeout after this much working time, e.g. 30m (default: run.timeout, none)', durationArg('--timeout'))
    .option('--allow-shell', 'offer the run_command tool (default: config tools.shell)')
    .option('--no-inherit', "do not start from an earlier task's summary")
    .option('--system-prompt-file <file>', 'replace the built-in system prompt')
    .addOption(new Option('--log-format <format>', 'log lines on stderr (default: text on a terminal, json otherwise)').choices(['text', 'json']))
    .action(withEnv(run))
}

async function run(ctx: CommandEnv, opts: RunOptions): Promise<void> {
  const given = [opts.task, opts.taskFile, opts.resume, opts.github, opts.gitlab].filter((x) => x !== undefined).length
  if (given === 0 && !opts.chat) throw new UsageError('no task given', 'pass --task TEXT, --task-file FILE (- for standard input), --github owner/repo#N, --gitlab group/project#N or --resume <uuid>, or start a --chat')
  if (given > 1) throw new UsageError('--task, --task-file, --github, --gitlab and --resume exclude each other', 'give one of them')
  if (opts.chat && (opts.github !== undefined || opts.gitlab !== undefined)) throw new UsageError('--chat starts a local session; it excludes --github and --gitlab', 'give one of them')
  if (opts.chat && opts.resume !== undefined) throw new UsageError('--chat starts a new session; a resumed chat task stays a chat', 'drop --chat')
  const flags: RunFlags = opts
  const prepared = opts.resume !== undefined ? await prepareResume(ctx, flags, opts.resume) : await prepareNew(ctx, flags)
  // Nothing was written until here: every check above can refuse with the tree untouched.
  const { runTask } = await import('../run/run-task.js')
  // A shell without a working sandbox is refused before the tree is touched (tools.sandbox: none opts out).
  shellSandbox(prepared.config, prepared.settings.allowShell, [])
  ensureLayout({ layout: ctx.layout, config: prepared.config, index: null, now: () => ctx.now(), warn: (m) => ctx.io.warn(m) })
  const outcome = await withTaskEnv(ctx, (env) =>
    runTask(
      {
        env: { ...env, config: prepared.config },
        config: prepared.config,
        settings: prepared.settings,
        stderr: process.stderr,
        logFormat: opts.logFormat ?? (process.stderr.isTTY ? 'text' : 'json'),
        signals: true,
        configFile: ctx.configSource === null ? null : resolve(process.cwd(), ctx.configSource),
      },
      prepared.start,
    ),
  )
  auditTask(ctx, 'run', outcome.uuid)
  if (ctx.json) ctx.io.json(outcome)
  else ctx.io.out(renderOutcome(outcome))
  if (outcome.exit_code !== 0) throw outcomeError(outcome)
}

interface Prepared {
  config: CommandEnv['config']
  settings: RunSettings
  start: RunStart
}

async function prepareNew(ctx: CommandEnv, flags: RunFlags): Promise<Prepared> {
  if (flags.github !== undefined || flags.gitlab !== undefined) return prepareRemote(ctx, flags)
  const text = flags.task ?? (flags.taskFile === undefined ? '' : readTextArg(flags.taskFile, 'task file', () => readFileSync(0, 'utf8')))
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
  if (settings.systemPromptFile) readTextArg(settings.systemPromptFile, 'system prompt file')
  await checkRecording(ctx, config)
  return { user, config, settings }
}

/** A GitHub or GitLab task: checked, fetched and composed before anything is written (a bad token writes nothing). */
async function prepareRemote(ctx: CommandEnv, flags: RunFlags): Promise<Prepared> {
  const load = flags.github !== undefined ? await githubLoader(flags.github) : await gitlabLoader(flags.gitlab as string)
  const { user, config, settings } = await settingsFor(ctx, flags)
  const task = await load(config)
  return { config, settings, start: { kind: 'new', source: { key: task.key, text: task.text }, user, channel: task.channel, seen: task.seen } }
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
    return gitlabChannelFor(config, { project: `${key.owner}/${key.repo}`, kind: key.task_type === 'merge_request' ? 'merge_request' : 'issue', iid: Number(key.task_id) })
  }
  return undefined
}

async function prepareResume(ctx: CommandEnv, flags: RunFlags, id: string): Promise<Prepared> {
  if (flags.taskId !== undefined) throw new UsageError('--task-id names a new task; a resumed task keeps its own', 'drop --task-id')
  const ref = resolveTask(ctx.layout, id)
  if (ref.location === 'running') await refuseLive(ctx, ref)
  if (ref.location === 'completed') throw new CtxError(`task ${ref.uuid} is finished (in completed/)`, { exitCode: 4, hint: 'start a new task with the same --task-id to continue from its summary' })
  assertRegularFiles(ref.dir, TASK_DATA_FILES)
  const meta = readMetadata(ref.dir)
  const user = meta.user ?? ctx.osUser
  const recorded = meta.config.llm_provider
  const sameProvider = flags.provider === undefined || flags.provider === recorded
  const config = effectiveConfig(ctx.config, user, {
    ...flags,
    ...(flags.provider === undefined && ['openai', 'ollama', 'replay'].includes(recorded) ? { provider: recorded } : {}),
    ...(flags.model === undefined && sameProvider && recorded !== 'replay' && meta.config.model ? { model: meta.config.model } : {}),
    ...(flags.replayFrom === undefined && sameProvider && meta.run?.replay_from ? { replayFrom: meta.run.replay_from } : {}),
  })
  checkProvider(config)
  await checkRecording(ctx, config)
  const settings = resumedRunSettings(config, meta.run, flags, meta.user, process.cwd())
  const channel = await channelOf(config, meta.task_key)
  return { config, settings, start: { kind: 'resume', ref, ...(channel ? { channel } : {}) } }
}

/** A task in running/ is resumed only when its agent is provably dead (kill -9, a crashed host). */
async function refuseLive(ctx: CommandEnv, ref: TaskRef): Promise<void> {
  await withTaskEnv(ctx, async (env) => {
    const assessment = assessTask(env, ref, { policy: stalenessPolicy(ctx.config) })
    if (assessment.stale) return
    const who = assessment.holder ? `pid ${assessment.holder.process_id} on ${assessment.holder.hostname}` : 'its agent'
    throw new LockedError(`task ${ref.uuid} is running (${who}: ${assessment.reason})`, 'pause it first with ctxagent pause, or wait for it to finish')
  }, { createIndex: false })
}

async function checkRecording(ctx: CommandEnv, config: CommandEnv['config']): Promise<void> {
  if (config.llm.provider !== 'replay') return
  const { checkRecordingPlays } = await import('../llm/replay.js')
  await checkRecordingPlays(config.llm.replay.from as string, ctx.layout)
}

/** A user or task id: one line of printable text, short enough to be a name. */
function checkName(value: string, what: string): string {
  const trimmed = value.trim()
  if (trimmed === '' || trimmed.length > 200 || /[\u0000-\u001f\u007f]/.test(trimmed)) {
    throw new UsageError(`${what} must be 1 to 200 printable characters`, `give a shorter ${what.slice(2)}`)
  }
  return trimmed
}

function renderOutcome(o: Outcome): string {
  const seconds = (o.duration_ms / 1000).toFixed(1)
  const lines = [`task ${o.uuid} ${o.status}${o.finish_status === 'blocked' ? ' (blocked)' : ''} after ${o.turns} turn(s), ${o.tokens.toLocaleString('en-US')} tokens, ${seconds}s`]
  if (o.inherited_from) lines.push(`inherited from: ${o.inherited_from}`)
  if (o.final_answer) lines.push('', o.final_answer.trim(), '')
  if (o.error) lines.push(`reason: ${o.error}`)
  if (o.status !== 'lost') lines.push(`files: ${o.dir}`)
  if (o.status === 'paused') lines.push(`resume: ctxagent run --resume ${o.uuid}`)
  return lines.join('\n')
}

function outcomeError(o: Outcome): CtxError {
  if (o.status === 'paused') return new CtxError(`task ${o.uuid} paused${o.error ? `: ${o.error}` : ''}`, { exitCode: o.exit_code, hint: `resume it with ctxagent run --resume ${o.uuid}` })
  if (o.status === 'timeout') return new CtxError(`task ${o.uuid} ran out of budget: ${o.error}`, { exitCode: 5, hint: 'raise --max-turns, --max-tokens or --timeout for the next task' })
  if (o.status === 'lost') return new CtxError(`task ${o.uuid}: ${o.error}`, { exitCode: 1, hint: 'another process took the task over; this one stopped writing' })
  return new CtxError(`task ${o.uuid} failed: ${o.error}`, { exitCode: 1, hint: `see ctxagent view ${o.uuid.slice(0, 8)} --tools` })
}
