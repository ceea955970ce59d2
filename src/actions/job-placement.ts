import { existsSync, realpathSync, statSync } from 'node:fs'
import { isAbsolute, resolve } from 'node:path'
import { UsageError } from '../errors.js'
import type { JobSpec } from '../fleet/queue/job-spec.js'
import { repoProblem } from '../fleet/queue/job-spec.js'
import { refuseTreeInWorkspace } from '../run/settings.js'
import { isPrintableName, NAME_RULE } from '../text.js'
import { validRef } from '../workspace/ref.js'

/** The flags of `enqueue` and `poll` that say where and how a job's task runs. */
export interface PlacementOptions {
  user?: string
  workspace?: string
  repo?: string
  taskId?: string
  maxTurns?: number
  maxTokens?: number
  maxCost?: number
  timeout?: number
  model?: string
  allowShell?: boolean
  /** none, branch or pr (docs/delivery.md). */
  deliver?: 'none' | 'branch' | 'pr'
}

/** Where and how a job's task runs, whatever it is: its workspace (or repository), user, name and budgets. */
export function placement(opts: PlacementOptions, workspacesDir: string | null, tree: string): JobSpec {
  const spec: JobSpec = {}
  for (const [flag, value] of [
    ['--repo', opts.repo],
    ['--workspace', opts.workspace],
    ['--user', opts.user],
    ['--task-id', opts.taskId],
  ] as const)
    if (value !== undefined) refuseNul(flag, value)
  if (opts.repo !== undefined) {
    if (opts.workspace !== undefined) throw new UsageError('--repo and --workspace exclude each other', 'give one: --repo clones a workspace for the task')
    if (workspacesDir === null)
      throw new UsageError('--repo needs fleet.workspaces_dir', 'set it in the config to a directory on the shared mount, outside the task tree')
    const hash = opts.repo.indexOf('#')
    const url = hash < 0 ? opts.repo : opts.repo.slice(0, hash)
    const ref = hash < 0 ? '' : opts.repo.slice(hash + 1)
    const problem = repoProblem(url)
    if (problem?.includes('user name or password'))
      throw new UsageError(
        `--repo: ${problem}`,
        "give it without them: a worker takes the token for github.com or gitlab.url from GITHUB_TOKEN/GITLAB_TOKEN, else from git's credential helper",
      )
    if (problem !== null)
      throw new UsageError(`--repo ${problem}`, 'give one like https://github.com/owner/repo.git#main, git@host:owner/repo.git or an absolute path')
    if (hash >= 0 && !validRef(ref))
      throw new UsageError(
        `--repo's ref '${ref.slice(0, 40)}' is not a branch, tag or commit name`,
        'give one like #main, #v1.2 or #<commit> (not starting with -), or no #',
      )
    // run's rule for a workspace holds for the clones' directory: never holding the tree, nor inside it.
    refuseTreeInWorkspace(resolve(workspacesDir), tree)
    spec.repo = url
    if (ref !== '') spec.ref = ref
  } else {
    spec.workspace = checkedWorkspace(opts.workspace)
    // As `run` refuses it: the agent could read or delete its own task files (checked here, not by the worker after the queue).
    refuseTreeInWorkspace(spec.workspace, tree)
  }
  for (const [key, value] of [
    ['user', opts.user],
    ['task_id', opts.taskId],
    ['model', opts.model],
  ] as const) {
    if (value === undefined) continue
    const trimmed = value.trim()
    if (!isPrintableName(trimmed)) throw new UsageError(`--${key.replace('_', '-')} must be ${NAME_RULE}`, 'give a shorter name')
    spec[key] = trimmed
  }
  if (opts.maxTurns !== undefined) spec.max_turns = opts.maxTurns
  if (opts.maxTokens !== undefined) spec.max_tokens = opts.maxTokens
  if (opts.maxCost !== undefined) spec.max_cost_usd = opts.maxCost
  if (opts.timeout !== undefined) spec.timeout = `${Math.ceil(opts.timeout / 1000)}s`
  if (opts.allowShell === true) spec.allow_shell = true
  if (opts.deliver !== undefined) spec.deliver = opts.deliver
  return spec
}

/** PostgreSQL text cannot hold a NUL byte: refused as the flag's fault, before the database is asked. */
export function refuseNul(what: string, value: string): void {
  const at = value.indexOf('\0')
  if (at >= 0)
    throw new UsageError(
      `${what} holds a NUL byte (\\0) at character ${at + 1}, which the fleet's database cannot store`,
      'remove it: a binary file is not a task',
    )
}

/** A job's workspace: a directory here, given as an absolute path, that must exist on every host too. */
function checkedWorkspace(given: string | undefined): string {
  const workspace = resolve(given ?? process.cwd())
  if (!isAbsolute(workspace) || !existsSync(workspace) || !statSync(workspace).isDirectory()) {
    throw new UsageError(`the workspace ${workspace} is not a directory here`, 'give a --workspace that exists on every host of the fleet (a shared mount)')
  }
  return realpathSync(workspace)
}
