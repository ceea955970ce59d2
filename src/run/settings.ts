import { realpathSync, statSync } from 'node:fs'
import { resolve, sep } from 'node:path'
import { MAX_TEXT_INPUT, readInputFile } from '../input-file.js'
import { isEnvironmentKey, PROVIDERS } from '../config/fixed.js'
import type { DeliverMode, Provider } from '../config/fixed.js'
import { activeEndpoint, missingApiKey } from '../config/endpoint.js'
import type { Config } from '../config/schema.js'
import { parseDuration } from '../duration.js'
import { UsageError } from '../errors.js'
import { realPathOf } from '../tools/workspace.js'
import type { DeliveryTarget, PrHead, RunRecord } from '../storage/task/metadata.js'

/** `ctxagent run`'s flags, as commander parsed them (budgets already numbers). */
export interface RunFlags {
  task?: string
  taskFile?: string
  resume?: string
  taskId?: string
  user?: string
  workspace?: string
  provider?: string
  model?: string
  replayFrom?: string
  maxTurns?: number
  maxTokens?: number
  /** --max-cost: the task's cost cap in USD. */
  maxCost?: number
  /** False with --no-wait: a usage limit pauses the task instead of being waited out. */
  wait?: boolean
  timeout?: number
  allowShell?: boolean
  inherit: boolean
  systemPromptFile?: string
  logFormat?: 'text' | 'json'
  chat?: boolean
  github?: string
  gitlab?: string
  /** none, branch or pr (docs/delivery.md); default deliver.mode. */
  deliver?: DeliverMode
  /** A review loop's follow-up statement, after the pull request's text (docs/delivery.md#the-review-loop). */
  followUpFile?: string
  /** The repository an eval's trial's workspace was made from (docs/eval.md#a-trial). */
  environmentOf?: string
}

/** Everything the loop needs to know about how to run this task. */
export interface RunSettings {
  workspace: string
  allowShell: boolean
  commandTimeoutSeconds: number
  maxTurns: number
  maxTokens: number | null
  timeoutMs: number | null
  systemPromptFile: string | null
  /** Appended to the system prompt: run.system_prompt_append, then users.<name>.system_prompt_append. */
  systemPromptAppend: string[]
  inherit: boolean
  /** A keep-alive chat session (docs/contract.md §6). */
  chat: boolean
  /** Delivery of the change when the task completes (docs/delivery.md). */
  deliver: DeliverMode
  /** Where it goes (default a new branch); a task on the agent's own PR pushes to its head branch. */
  deliverTarget?: DeliveryTarget
  /** The pull request whose head branch the workspace has checked out (docs/delivery.md#the-review-loop). */
  prHead?: PrHead | null
  /** The task's cost cap in USD across resumes (--max-cost, run.max_cost_usd, users.<name>.run.max_cost_usd), or null. */
  maxCostUsd: number | null
  /** Wait out a provider's usage limit (false: --no-wait, pause instead). */
  wait: boolean
  /**
   * The repository the workspace was made from (an eval's trial: its task's `repo`, docs/eval.md#a-trial), as an
   * `environments` key names it (owner/repo, or a local repository's path): the operator's entry is matched by it,
   * as for a run on that repository; null: by the workspace (docs/environments.md#the-file).
   */
  environmentOf: string | null
}

/**
 * The config as this task sees it (docs/contract.md §12.7): `users.<name>` overrides applied, then
 * the flags (--provider, --model, --replay-from). A copy; the loaded config is unchanged.
 */
export function effectiveConfig(base: Config, user: string, flags: Pick<RunFlags, 'provider' | 'model' | 'replayFrom'>): Config {
  if (flags.model !== undefined && flags.model.trim() === '')
    throw new UsageError('--model is empty', 'name the model, or leave --model out for the configured one')
  const config = structuredClone(base)
  const own = userSettings(config, user)
  const provider = (flags.provider ?? own?.llm?.provider ?? config.llm.provider) as Provider
  if (flags.provider !== undefined && (!PROVIDERS.includes(flags.provider as Provider) || flags.provider === 'none')) {
    throw new UsageError(`--provider ${flags.provider} is not a provider`, 'use openai (any OpenAI-compatible server), anthropic, ollama or replay')
  }
  config.llm.provider = provider
  if (flags.replayFrom !== undefined && provider !== 'replay') {
    throw new UsageError(`--replay-from plays a recording, but the provider is ${provider}`, 'pass --provider replay as well, or drop --replay-from')
  }
  const endpoint =
    provider === 'ollama' ? config.llm.ollama : provider === 'openai' ? config.llm.openai : provider === 'anthropic' ? config.llm.anthropic : null
  if (endpoint) {
    if (own?.llm?.model !== undefined) endpoint.model = own.llm.model
    if (own?.llm?.context_length !== undefined) endpoint.context_length = own.llm.context_length
    if (flags.model !== undefined) endpoint.model = flags.model
  } else if (provider === 'replay' && own?.llm?.context_length !== undefined) {
    config.llm.replay.context_length = own.llm.context_length
  }
  if (flags.replayFrom !== undefined) config.llm.replay.from = flags.replayFrom
  if (own?.run?.max_turns !== undefined) config.run.max_turns = own.run.max_turns
  if (own?.run?.max_tokens !== undefined) config.run.max_tokens = own.run.max_tokens
  if (own?.run?.max_cost_usd !== undefined) config.run.max_cost_usd = own.run.max_cost_usd
  return config
}

/** Refuses, before anything is written, an LLM setup that cannot work. */
export function checkProvider(config: Config): void {
  const provider = config.llm.provider
  if (provider === 'none') throw new UsageError('no LLM is configured (llm.provider: none)', 'set llm.provider in the config, or pass --provider')
  if (provider === 'replay') {
    if (config.llm.replay.from === null)
      throw new UsageError('the replay provider needs a recording', 'pass --replay-from <uuid|messages.jsonl> or set llm.replay.from')
    return
  }
  const missing = missingApiKey(config)
  if (missing !== null) throw new UsageError(missing.message, missing.hint)
  if (activeEndpoint(config).model.trim() === '') throw new UsageError(`llm.${provider}.model is empty`, 'name the model to use, or pass --model')
}

/** Settings of a new task: flags over config. */
export function newRunSettings(config: Config, flags: RunFlags, cwd: string): RunSettings {
  return {
    workspace: resolveWorkspace(flags.workspace ?? cwd),
    allowShell: flags.allowShell === true || config.tools.shell,
    commandTimeoutSeconds: config.tools.command_timeout_seconds,
    maxTurns: flags.maxTurns ?? config.run.max_turns,
    maxTokens: flags.maxTokens ?? config.run.max_tokens,
    timeoutMs: flags.timeout ?? (config.run.timeout === null ? null : parseDuration(config.run.timeout, 'run.timeout')),
    systemPromptFile: flags.systemPromptFile === undefined ? null : resolve(cwd, flags.systemPromptFile),
    systemPromptAppend: appends(config, flags.user),
    inherit: flags.inherit && config.context.inheritance.enabled,
    chat: flags.chat === true,
    deliver: flags.deliver ?? config.deliver.mode,
    maxCostUsd: flags.maxCost ?? config.run.max_cost_usd,
    wait: flags.wait !== false,
    environmentOf: environmentOf(flags.environmentOf),
  }
}

/** Settings of a resumed task: what it started with, where a flag does not say otherwise. */
export function resumedRunSettings(config: Config, record: RunRecord | undefined, flags: RunFlags, user: string | null, cwd: string): RunSettings {
  const fresh = newRunSettings(config, { ...flags, ...(user === null ? {} : { user }) }, cwd)
  if (record === undefined) return fresh
  return {
    ...fresh,
    workspace: flags.workspace === undefined ? resolveWorkspace(record.workspace) : fresh.workspace,
    allowShell: flags.allowShell === true || record.allow_shell,
    maxTurns: flags.maxTurns ?? record.max_turns,
    maxTokens: flags.maxTokens ?? record.max_tokens,
    timeoutMs: flags.timeout ?? record.timeout_ms,
    systemPromptFile: fresh.systemPromptFile ?? record.system_prompt_file,
    chat: record.chat === true,
    // A resume delivers as the task was started to (its base is in the record).
    deliver: record.deliver ?? 'none',
    ...(record.deliver_target ? { deliverTarget: record.deliver_target } : {}),
    ...(record.pr_head !== undefined ? { prHead: record.pr_head } : {}),
    maxCostUsd: flags.maxCost ?? (record.max_cost_usd !== undefined ? record.max_cost_usd : fresh.maxCostUsd),
    // A resume that prepares the environment again (a stop came during setup) matches the same entry.
    environmentOf: fresh.environmentOf ?? record.environment_of ?? null,
  }
}

export function runRecord(settings: RunSettings, config: Config): RunRecord {
  return {
    replay_from: config.llm.provider === 'replay' ? config.llm.replay.from : null,
    workspace: settings.workspace,
    allow_shell: settings.allowShell,
    max_turns: settings.maxTurns,
    max_tokens: settings.maxTokens,
    timeout_ms: settings.timeoutMs,
    system_prompt_file: settings.systemPromptFile,
    ...(settings.chat ? { chat: true } : {}),
    ...(settings.prHead !== undefined ? { pr_head: settings.prHead } : {}),
    ...(settings.maxCostUsd !== null ? { max_cost_usd: settings.maxCostUsd } : {}),
    ...(settings.environmentOf !== null ? { environment_of: settings.environmentOf } : {}),
  }
}

function environmentOf(flag: string | undefined): string | null {
  if (flag === undefined) return null
  if (!isEnvironmentKey(flag))
    throw new UsageError(`--environment-of ${flag} is not owner/repo or an absolute path`, 'name the repository as environments: keys do')
  return flag
}

function appends(config: Config, user: string | undefined): string[] {
  const out: string[] = []
  if (config.run.system_prompt_append) out.push(config.run.system_prompt_append)
  const own = user === undefined ? undefined : userSettings(config, user)?.system_prompt_append
  if (own) out.push(own)
  return out
}

/**
 * The workspace must neither contain the task tree nor lie inside it (docs/contract.md §1): the agent's
 * grep, list_dir or `git clean -fdx` would otherwise read or delete its own task files.
 * Compared by real paths; a tree not created yet is judged by its nearest existing parent.
 */
export function refuseTreeInWorkspace(workspace: string, base: string): void {
  const tree = realPathOf(base)
  const hint = 'keep the task tree outside the workspace: pass another --workspace, or --home (CTXAGENT_HOME) elsewhere'
  if (tree === workspace || tree.startsWith(workspace.endsWith(sep) ? workspace : `${workspace}${sep}`)) {
    throw new UsageError(`the workspace ${workspace} contains the task tree ${tree}; the agent could read or delete its own task files`, hint)
  }
  if (workspace.startsWith(`${tree}${sep}`)) throw new UsageError(`the workspace ${workspace} is inside the task tree ${tree}`, hint)
}

/** A --workspace as its real path: an existing directory, else a usage error. */
export function resolveWorkspace(dir: string): string {
  if (dir.trim() === '') throw new UsageError('--workspace is empty', 'pass --workspace <an existing directory>, or leave it out for the current directory')
  let real: string
  try {
    real = realpathSync(dir)
  } catch {
    throw new UsageError(`workspace ${dir} does not exist`, 'pass --workspace <an existing directory>')
  }
  if (!statSync(real).isDirectory()) throw new UsageError(`workspace ${dir} is not a directory`, 'pass --workspace <an existing directory>')
  return real
}

/** Reads a small text file named on the command line, with a one-line error. */
export function readTextArg(path: string, what: string, stdin?: () => string): string {
  if (path === '-' && stdin) return stdin()
  return readInputFile(path, what, 'give a readable text file of at most 1 MB', MAX_TEXT_INPUT)
}

/** users.<name>, only as the config file gave it (never an inherited property: --user constructor). */
function userSettings(config: Config, user: string): Config['users'][string] | undefined {
  return Object.hasOwn(config.users, user) ? config.users[user] : undefined
}
