import { existsSync, statSync } from 'node:fs'
import { isAbsolute, resolve } from 'node:path'
import { Command } from 'commander'
import type { CommandEnv } from '../command-env.js'
import { auditTask } from '../command-env.js'
import { CtxError, UsageError } from '../errors.js'
import { readStdinText } from '../input-file.js'
import type { JobSpec } from '../fleet/jobs.js'
import { JobQueue } from '../fleet/jobs.js'
import { resolveTask } from '../storage/fs/layout.js'
import { readTextArg } from '../run/settings.js'
import { durationArg, positiveIntArg, withEnv } from './shared.js'
import { fleetPool } from './fleet-db.js'

export interface EnqueueOptions {
  task?: string
  taskFile?: string
  github?: string
  gitlab?: string
  resume?: string
  user?: string
  workspace?: string
  repo?: string
  taskId?: string
  maxTurns?: number
  maxTokens?: number
  timeout?: number
  priority?: number
}

export function enqueueCommand(): Command {
  return new Command('enqueue')
    .description("queue a task for the fleet's workers (needs fleet.database_url); prints the task's uuid")
    .option('--task <text>', 'the task, as text')
    .option('--task-file <file>', 'the task, from a file (- for standard input)')
    .option('--github <owner/repo#N>', 'a GitHub issue or pull request')
    .option('--gitlab <group/project#N|!N>', 'a GitLab issue (#N) or merge request (!N)')
    .option('--resume <uuid>', 'continue a paused task, on whichever host takes it')
    .option('--user <name>', 'whose task this is (default: the OS user)')
    .option('--workspace <dir>', 'the only directory tools may touch: a path that exists on every host (default: the current directory)')
    .option('--repo <url[#ref]>', 'clone this repository for the task into fleet.workspaces_dir (on the shared mount), at a branch, tag or commit after #')
    .option('--task-id <id>', 'a name for the task; a later task with the same id inherits its summary')
    .option('--max-turns <n>', 'stop as timeout after this many LLM turns', positiveIntArg)
    .option('--max-tokens <n>', 'stop as timeout after this many tokens in total', positiveIntArg)
    .option('--timeout <duration>', 'stop as timeout after this much working time, e.g. 30m', durationArg('--timeout'))
    .option('--priority <n>', 'higher runs first (default 0)', priorityArg)
    .action(withEnv(enqueue))
}

export function priorityArg(value: string): number {
  const n = Number(value)
  if (!/^-?\d+$/.test(value.trim()) || !Number.isSafeInteger(n) || Math.abs(n) > 1_000_000) throw new UsageError(`--priority '${value.slice(0, 20)}' is not a whole number`, 'give one from -1000000 to 1000000')
  return n
}

async function enqueue(ctx: CommandEnv, opts: EnqueueOptions): Promise<void> {
  const given = [opts.task, opts.taskFile, opts.github, opts.gitlab, opts.resume].filter((x) => x !== undefined).length
  if (given !== 1) throw new UsageError(given === 0 ? 'no task given' : '--task, --task-file, --github, --gitlab and --resume exclude each other', 'pass one of --task TEXT, --task-file FILE, --github owner/repo#N, --gitlab group/project#N or --resume <uuid>')
  // Everything is checked before the database is touched: a bad flag queues nothing.
  let taskUuid: string
  let spec: JobSpec = {}
  if (opts.resume !== undefined) {
    const extra = (['user', 'workspace', 'repo', 'taskId', 'maxTurns', 'maxTokens', 'timeout'] as const).filter((k) => opts[k] !== undefined)
    if (extra.length > 0) throw new UsageError('a resumed task keeps its own settings', `drop ${extra.map((k) => `--${k.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)}`).join(', ')}`)
    const ref = resolveTask(ctx.layout, opts.resume)
    if (ref.location !== 'paused') throw new CtxError(`task ${ref.uuid} is ${ref.location === 'running' ? 'running' : 'finished'} (in ${ref.location}/), not paused`, { exitCode: 4, hint: ref.location === 'running' ? 'pause it first with ctxagent pause' : 'enqueue a new task with the same --task-id to continue from its summary' })
    taskUuid = ref.uuid
  } else {
    spec = await newSpec(opts, ctx.config.fleet.workspaces_dir)
    taskUuid = (await import('uuid')).v4()
  }
  const { pool } = await fleetPool(ctx, 'enqueue')
  try {
    const id = await new JobQueue(pool).enqueue({ task_uuid: taskUuid, kind: opts.resume !== undefined ? 'resume' : 'new', spec, priority: opts.priority ?? 0 }).catch((err: unknown) => {
      throw new CtxError(`the job was not queued (${(err as Error).message})`, { exitCode: 1, hint: 'check that the database is up, then enqueue again' })
    })
    if (id === null) throw new CtxError(`task ${taskUuid} already has a job waiting or running`, { exitCode: 4, hint: 'see ctxagent fleet' })
    auditTask(ctx, 'enqueue', taskUuid)
    if (ctx.json) ctx.io.json({ uuid: taskUuid, job: id })
    else ctx.io.out(taskUuid)
  } finally {
    await pool.end().catch(() => undefined)
  }
}

/** A git URL: scheme://…, scp-like user@host:path, or an absolute path (a repository on the shared mount). */
const REPO_URL = /^(?:(?:https?|ssh|git|file):\/\/[^\s#]+|[\w.-]+@[\w.-]+:[^\s#]+|\/[^\s#]*)$/

async function newSpec(opts: EnqueueOptions, workspacesDir: string | null): Promise<JobSpec> {
  const spec: JobSpec = {}
  if (opts.github !== undefined) {
    const { parseGithubRef } = await import('../sources/github.js')
    parseGithubRef(opts.github)
    spec.github = opts.github
  } else if (opts.gitlab !== undefined) {
    const { parseGitlabRef } = await import('../sources/gitlab.js')
    parseGitlabRef(opts.gitlab)
    spec.gitlab = opts.gitlab
  } else {
    const text = opts.task ?? readTextArg(opts.taskFile as string, 'task file', () => readStdinText('task file', 'give a task of at most 1 MB'))
    if (text.trim() === '') throw new UsageError('the task is empty', 'describe what the agent should do')
    spec.task = text
  }
  return { ...spec, ...placement(opts, workspacesDir) }
}

/** Where and how a job's task runs, whatever it is: its workspace (or repository), user, name and budgets. */
export function placement(opts: Omit<EnqueueOptions, 'task' | 'taskFile' | 'github' | 'gitlab' | 'resume' | 'priority'>, workspacesDir: string | null): JobSpec {
  const spec: JobSpec = {}
  if (opts.repo !== undefined) {
    if (opts.workspace !== undefined) throw new UsageError('--repo and --workspace exclude each other', 'give one: --repo clones a workspace for the task')
    if (workspacesDir === null) throw new UsageError('--repo needs fleet.workspaces_dir', 'set it in the config to a directory on the shared mount, outside the task tree')
    const hash = opts.repo.indexOf('#')
    const url = hash < 0 ? opts.repo : opts.repo.slice(0, hash)
    const ref = hash < 0 ? '' : opts.repo.slice(hash + 1)
    if (!REPO_URL.test(url) || url.length > 2000) throw new UsageError(`--repo '${url.slice(0, 80)}' is not a git URL`, 'give one like https://github.com/owner/repo.git#main, git@host:owner/repo.git or an absolute path')
    if (hash >= 0 && !/^[\w./-]{1,200}$/.test(ref)) throw new UsageError(`--repo's ref '${ref.slice(0, 40)}' is not a branch, tag or commit name`, 'give one like #main, #v1.2 or #<commit>, or no #')
    spec.repo = url
    if (ref !== '') spec.ref = ref
  } else {
    spec.workspace = checkedWorkspace(opts.workspace)
  }
  for (const [key, value] of [['user', opts.user], ['task_id', opts.taskId]] as const) {
    if (value === undefined) continue
    const trimmed = value.trim()
    if (trimmed === '' || trimmed.length > 200 || /[\u0000-\u001f\u007f]/.test(trimmed)) throw new UsageError(`--${key.replace('_', '-')} must be 1 to 200 printable characters`, 'give a shorter name')
    spec[key] = trimmed
  }
  if (opts.maxTurns !== undefined) spec.max_turns = opts.maxTurns
  if (opts.maxTokens !== undefined) spec.max_tokens = opts.maxTokens
  if (opts.timeout !== undefined) spec.timeout = `${Math.ceil(opts.timeout / 1000)}s`
  return spec
}

/** A job's workspace: a directory here, given as an absolute path, that must exist on every host too. */
function checkedWorkspace(given: string | undefined): string {
  const workspace = resolve(given ?? process.cwd())
  if (!isAbsolute(workspace) || !existsSync(workspace) || !statSync(workspace).isDirectory()) {
    throw new UsageError(`the workspace ${workspace} is not a directory here`, 'give a --workspace that exists on every host of the fleet (a shared mount)')
  }
  return workspace
}
