import { existsSync } from 'node:fs'
import { basename } from 'node:path'
import type { CommandEnv } from '../../command-env.js'
import { CtxError, resumeRaceLost, UsageError } from '../../errors.js'
import { activeEndpoint } from '../../config/endpoint.js'
import { readStdinText } from '../../input-file.js'
import { firstPromptTokens } from '../../run/budget-start.js'
import type { refuseSpentBudget } from '../../run/budget-start.js'
import { taskSystemPrompt } from '../../run/prompt.js'
import { openPullOfIssue } from '../../run/issue-pull.js'
import type { RunStart } from '../../run/run-start.js'
import { checkProvider, effectiveConfig, newRunSettings, readTextArg, refuseTreeInWorkspace, resumedRunSettings } from '../../run/settings.js'
import type { RunFlags, RunSettings } from '../../run/settings.js'
import type { Channel, RemoteTask } from '../../sources/types.js'
import { assertRegularFiles } from '../../storage/fs/files.js'
import { resolveTask, TASK_DATA_FILES } from '../../storage/fs/layout.js'
import type { TaskRef } from '../../storage/fs/layout.js'
import { resumableFromCompleted } from '../../storage/task/state.js'
import { readMetadata } from '../../storage/task/metadata.js'
import type { TaskKey } from '../../storage/task/metadata.js'
import { readState } from '../../storage/task/state.js'
import type { TaskState } from '../../storage/task/state.js'
import { isPrintableName, NAME_RULE } from '../../text.js'
import { finishedHint, refuseLive, spentBudget } from './run-refusals.js'

// What `run` starts from: a new task (text, a file, a chat), one from GitHub or GitLab, or a resumed one,
// with its config and settings; all checked and read, nothing written.

export interface Prepared {
  config: CommandEnv['config']
  settings: RunSettings
  start: RunStart
}

export async function prepareNew(ctx: CommandEnv, flags: RunFlags, uuid: string | undefined): Promise<Prepared> {
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
  // An issue whose work is already in an open PR of ctxagent's: continued there, one more commit on its branch (docs/delivery.md#one-pull-request-per-issue).
  if (task.pull === undefined && settings.deliver === 'pr') {
    const open = await openPullOfIssue(config, ctx.layout, task.key)
    if (open !== null) {
      ctx.io.warn(`the issue already has ctxagent's open pull request ${open.url}: this task continues it (one more commit on ${open.branch})`)
      task.pull = { head: { branch: open.branch, number: open.number, url: open.url }, opener: open.opener, byBot: open.byBot }
    }
  }
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
  const { parseGithubRef, loadGithubTask } = await import('../../sources/github.js')
  const ref = parseGithubRef(spec)
  return (config) => loadGithubTask(config, ref)
}

async function gitlabLoader(spec: string): Promise<(config: CommandEnv['config']) => Promise<RemoteTask>> {
  const { parseGitlabRef, loadGitlabTask } = await import('../../sources/gitlab.js')
  const ref = parseGitlabRef(spec)
  return (config) => loadGitlabTask(config, ref)
}

export async function prepareResume(ctx: CommandEnv, flags: RunFlags, id: string): Promise<Prepared> {
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

/** The channel of a resumed task that came from GitHub or GitLab, found again from its key. */
async function channelOf(config: CommandEnv['config'], key: TaskKey): Promise<Channel | undefined> {
  if (key.owner === null) return undefined
  if (key.task_source === 'github') {
    const { githubChannelFor } = await import('../../sources/github.js')
    return githubChannelFor(config, { owner: key.owner, repo: key.repo, number: Number(key.task_id) })
  }
  if (key.task_source === 'gitlab') {
    const { gitlabChannelFor } = await import('../../sources/gitlab.js')
    return gitlabChannelFor(config, {
      project: `${key.owner}/${key.repo}`,
      kind: key.task_type === 'merge_request' ? 'merge_request' : 'issue',
      iid: Number(key.task_id),
    })
  }
  return undefined
}

/** The task about to start, as the cost caps see it. */
export function startingTask(prepared: Prepared, ctx: CommandEnv): Parameters<typeof refuseSpentBudget>[2] {
  const { start, config, settings } = prepared
  const model = activeEndpoint(config).model
  if (start.kind === 'new') {
    const promptTokens = firstPromptTokens({ system: taskSystemPrompt(settings, null), text: start.source.text })
    return { user: start.user, model, state: null, uuid: null, maxCostUsd: settings.maxCostUsd, promptTokens }
  }
  // The directory gone meanwhile: another process resumed it first (a lost race, exit 4), as in prepareResume.
  const meta = stillThere(start.ref, () => readMetadata(start.ref.dir))
  const state = readStateOrNull(start.ref.dir)
  const promptTokens = state === null ? 0 : firstPromptTokens({ state })
  return { user: meta.user ?? ctx.osUser, model, state, uuid: start.ref.uuid, maxCostUsd: settings.maxCostUsd, promptTokens }
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

function readStateOrNull(dir: string): TaskState | null {
  try {
    return readState(dir)
  } catch {
    return null
  }
}

async function checkRecording(ctx: CommandEnv, config: CommandEnv['config']): Promise<void> {
  if (config.llm.provider !== 'replay') return
  const { checkRecordingPlays } = await import('../../llm/replay.js')
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
