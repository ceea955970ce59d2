import { resolve } from 'node:path'
import { Command, Option } from 'commander'
import type { CommandEnv } from '../command-env.js'
import { UsageError } from '../errors.js'
import { CLI } from '../actions/actor.js'
import { enqueueJob, resumeRequest } from '../actions/enqueue.js'
import type { JobRequest } from '../actions/enqueue.js'
import { readStdinText } from '../input-file.js'
import { isPrintableName, NAME_RULE } from '../text.js'
import type { JobSpec } from '../fleet/queue/job-spec.js'
import { resolveTask } from '../storage/fs/layout.js'
import { readTextArg } from '../run/settings.js'
import { durationArg, positiveIntArg, priorityArg, usdArg, withEnv } from '../command-kit/shared.js'
import { placement, refuseNul } from '../actions/job-placement.js'
import type { PlacementOptions } from '../actions/job-placement.js'
import { hiddenPaths, shellSandbox } from '../run/sandbox-setup.js'

export interface EnqueueOptions extends PlacementOptions {
  task?: string
  taskFile?: string
  github?: string
  gitlab?: string
  resume?: string
  priority?: number
  key?: string
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
    .option(
      '--max-cost <usd>',
      'pause the task before a request that would take its spend past this many USD (with --resume: the raised cap it goes on under; docs/running.md#budgets)',
      usdArg,
    )
    .option('--timeout <duration>', 'stop as timeout after this much working time, e.g. 30m', durationArg('--timeout'))
    .option('--model <name>', 'model name (default: config llm.<provider>.model)')
    .option('--allow-shell', 'offer the run_command tool (default: config tools.shell)')
    .option('--priority <n>', 'higher runs first (default 0)', priorityArg)
    .addOption(
      new Option(
        '--deliver <mode>',
        "when the task completes: none, commit its change on a new branch, or push it and open a pull/merge request (default: the worker's deliver.mode; docs/delivery.md)",
      ).choices(['none', 'branch', 'pr']),
    )
    .option(
      '--key <key>',
      'an idempotency key: while a job with this key waits, runs or retries, and for fleet.key_retention_hours (24) after it ended done, enqueue queues nothing and prints its task',
    )
    .action(withEnv(enqueue))
}

async function enqueue(ctx: CommandEnv, opts: EnqueueOptions): Promise<void> {
  const given = [opts.task, opts.taskFile, opts.github, opts.gitlab, opts.resume].filter((x) => x !== undefined).length
  if (given !== 1)
    throw new UsageError(
      given === 0 ? 'no task given' : '--task, --task-file, --github, --gitlab and --resume exclude each other',
      'pass one of --task TEXT, --task-file FILE, --github owner/repo#N, --gitlab group/project#N or --resume <uuid>',
    )
  // Everything is checked before the database is touched: a bad flag queues nothing.
  let request: JobRequest
  if (opts.resume !== undefined) {
    const extra = (['user', 'workspace', 'repo', 'taskId', 'maxTurns', 'maxTokens', 'timeout', 'model', 'allowShell', 'deliver'] as const).filter(
      (k) => opts[k] !== undefined,
    )
    if (extra.length > 0)
      throw new UsageError(
        'a resumed task keeps its own settings',
        `drop ${extra.map((k) => `--${k.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)}`).join(', ')}`,
      )
    request = resumeRequest(resolveTask(ctx.layout, opts.resume), {
      priority: opts.priority ?? 0,
      ...(opts.maxCost === undefined ? {} : { maxCostUsd: opts.maxCost }),
    })
  } else {
    const spec = await newSpec(opts, ctx.config.fleet.workspaces_dir, ctx.layout.base)
    // What run --allow-shell refuses at start is refused here, not a second into the job: bubblewrap
    // working, and the sandbox's user able to write the workspace (a --repo clone is made writable by the worker).
    if (spec.allow_shell === true && spec.workspace !== undefined)
      shellSandbox(ctx.config, true, hiddenPaths(ctx.layout.base, ctx.configSource === null ? null : resolve(ctx.configSource)), spec.workspace)
    // Whose task this is goes in the spec too: without it the worker's `run` would take its own OS user for the task's
    // (the caps it checks, the spend it adds), not the job's user that per_user and the claim's caps count.
    const user = spec.user ?? ctx.osUser
    request = { uuid: (await import('uuid')).v4(), kind: 'new', spec: { ...spec, user }, priority: opts.priority ?? 0, user, key: null }
  }
  if (opts.key !== undefined) request.key = checkedKey(opts.key)
  const outcome = await enqueueJob(ctx, request, CLI)
  if (ctx.json)
    ctx.io.json({
      uuid: outcome.uuid,
      job: outcome.job,
      queued: outcome.kind === 'queued',
      ...(outcome.kind === 'held' ? { state: outcome.state, ...(outcome.finished_at !== null ? { finished_at: outcome.finished_at } : {}) } : {}),
    })
  else ctx.io.out(outcome.uuid)
  // Idempotent: the same request again is the job already queued, or done (exit 0), said on stderr.
  if (outcome.kind === 'held' && !ctx.json) {
    ctx.io.warn(
      outcome.state === 'done'
        ? `job ${outcome.job} with key '${outcome.key}' ended done at ${outcome.finished_at ?? '?'} (keys are kept ${ctx.config.fleet.key_retention_hours} h after, fleet.key_retention_hours); nothing queued (its task is printed)`
        : `job ${outcome.job} with key '${outcome.key}' is ${outcome.state} already; nothing queued (its task is printed)`,
    )
  }
}

/** An idempotency key: a name (NAME_RULE), spaces and all. */
function checkedKey(key: string): string {
  if (!isPrintableName(key)) throw new UsageError(`--key must be ${NAME_RULE}`, 'use a name that says what the job is for, e.g. nightly-2024-06-01')
  return key
}

async function newSpec(opts: EnqueueOptions, workspacesDir: string | null, tree: string): Promise<JobSpec> {
  const spec: JobSpec = {}
  for (const [flag, value] of [
    ['--github', opts.github],
    ['--gitlab', opts.gitlab],
  ] as const)
    if (value !== undefined) refuseNul(flag, value)
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
    refuseNul(opts.task !== undefined ? '--task' : 'the task file', text)
    if (text.trim() === '') throw new UsageError('the task is empty', 'describe what the agent should do')
    spec.task = text
  }
  return { ...spec, ...placement(opts, workspacesDir, tree) }
}
