import type { Config } from '../config/schema.js'
import { itemTitle, openChangeRequest } from '../sources/change-request.js'
import { marker } from '../sources/marker.js'
import { maskText } from '../storage/format/mask.js'
import type { DeliveryTarget, TaskKey } from '../storage/task/metadata.js'
import { pauseAtForTest } from '../test-pause.js'
import { refusals } from './checks.js'
import { ctxagentCommit, placeInRepository } from './commit.js'
import { git } from './git.js'
import { outgoingRefusals } from './outgoing.js'
import { fileChanges, prBody } from './pr-body.js'
import type { TaskFacts } from './pr-body.js'
import { forgeOf, notTheTaskRepository, push, remoteTips } from './push.js'
import { repositoryChanged } from './repository.js'
import type { RepositoryRecord } from './repository.js'
import { stage } from './stage.js'
import type { Staged } from './stage.js'

export interface DeliveryInput {
  config: Config
  mode: 'branch' | 'pr'
  /** The repository the task started with (metadata's `run.base_git`): delivery reads and writes through it only. */
  repository: RepositoryRecord
  /** What the task started from (metadata's run record). */
  base: { commit: string; branch: string | null; remote: string | null }
  /** The commit an earlier attempt made, as the task's state recorded it (null: none). */
  made: string | null
  /** Records the commit in the task's state before it goes anywhere (the record `made` is read from next time). */
  remember(commit: string): Promise<void>
  target: DeliveryTarget
  uuid: string
  key: TaskKey
  /** The model's final answer (masked here before it goes anywhere). */
  answer: string
  /** The task's figures and last check for the pull request's body (docs/delivery.md#the-pull-request). */
  facts?: TaskFacts | null
}

/** state.json's `delivery` (docs/delivery.md#what-is-recorded). */
export interface DeliveryOutcome {
  mode: 'branch' | 'pr'
  branch: string | null
  commit: string | null
  pushed: boolean
  pr: { number: number; url: string } | null
  /** Why nothing (or not all) was delivered; null: delivered. */
  refused: string | null
}

/**
 * Delivers a completed task's change (docs/delivery.md): ctxagent's own commit of the
 * work tree's files, on a branch of the repository the task started with, without moving
 * its checkout; with mode pr, once nothing the push would send holds a secret, pushes it
 * and opens a PR/MR (or, on a PR's head branch, pushes one more commit there).
 * Idempotent: a second call after a crash reuses the commit the task's state recorded and
 * finds the PR it opened. Never throws for the change or the forge: what went wrong is
 * the outcome's `refused`.
 */
export async function deliver(input: DeliveryInput): Promise<DeliveryOutcome> {
  const branch = input.target.kind === 'pr-head' ? input.target.branch : branchName(input.config.deliver.branch, input.key, input.uuid)
  const ref = `refs/heads/${branch}`
  const outcome: DeliveryOutcome = { mode: input.mode, branch: null, commit: null, pushed: false, pr: null, refused: null }
  const refuse = (why: string): DeliveryOutcome => ({ ...outcome, refused: maskText(why) })
  if (!(await validBranch(branch, input.repository.top))) return refuse(`the branch name ${branch} is not a valid git branch name (deliver.branch)`)
  const changed = await repositoryChanged(input.repository)
  if (changed !== null) return refuse(changed)
  let staged: Staged | null = null
  try {
    staged = await stage(input.repository, input.base.commit)
    if (staged.tree === staged.baseTree) return refuse('no changes: the workspace holds nothing to commit over the commit the task started from')
    const problems = await refusals(staged, input.base.commit, { exclude: input.config.deliver.exclude, maxFileBytes: input.config.deliver.max_file_bytes })
    if (problems.length > 0) return refuse(`not delivered: ${listed(problems)}. The workspace keeps the files.`)
    const commit = await ctxagentCommit(
      staged,
      { parent: input.base.commit, made: input.made, ...identityOf(input.config), message: commitMessage(input) },
      ref,
    )
    // Recorded before it leaves the staging directory: a re-run after a crash finds this very commit, never one of the same shape.
    await input.remember(commit)
    await placeInRepository(staged, input.repository, ref, commit, input.target.kind === 'new-branch')
    Object.assign(outcome, { branch, commit })
    await pauseAtForTest('deliver-committed')
    if (input.mode === 'branch') return outcome
    if (input.base.remote === null) return refuse('the workspace had no origin when the task started; the branch is committed, not pushed')
    const elsewhere = notTheTaskRepository(input.config, input.key, input.base.remote)
    if (elsewhere !== null) return refuse(elsewhere)
    const leaving = await outgoingRefusals(staged, commit, await remoteTips(staged, input.config, input.base.remote))
    if (leaving.length > 0) return refuse(`not pushed: ${listed(leaving)}. The branch is committed in the workspace.`)
    await push(staged, input.config, input.base.remote, branch)
    outcome.pushed = true
    await pauseAtForTest('deliver-pushed')
    if (input.target.kind === 'pr-head') return { ...outcome, pr: input.target.pr }
    const forge = forgeOf(input.config, input.key, input.base.remote)
    if (forge === null)
      return refuse(`the branch is pushed, but ${input.base.remote} is on no configured forge (github.api_url, gitlab.url): no pull request opened`)
    const fromItem = (input.key.task_source === 'github' || input.key.task_source === 'gitlab') && /^\d+$/.test(input.key.task_id)
    const title = fromItem ? await itemTitle(input.config, forge, input.key.task_type, Number(input.key.task_id)) : firstLine(input.answer)
    const closes = fromItem && input.key.task_type === 'issue' ? input.key.task_id : null
    const body = prBody({ answer: input.answer, closes, uuid: input.uuid, changes: await fileChanges(staged), facts: input.facts ?? null })
    outcome.pr = await openChangeRequest(input.config, forge, {
      branch,
      base: input.config.deliver.base ?? input.base.branch,
      title: maskText(title),
      body,
      draft: input.config.deliver.draft,
      labels: input.config.deliver.labels,
      marker: marker(input.uuid),
    })
    return outcome
  } catch (err) {
    return refuse(`delivery failed: ${(err as Error).message}`)
  } finally {
    staged?.discard()
  }
}

/** deliver.author, else the bot's name, with a no-reply address. */
function identityOf(config: Config): { name: string; email: string } {
  const author = config.deliver.author
  const name = author.name ?? config.github.bot_name ?? config.gitlab.bot_name ?? 'ctxagent'
  const email = author.email ?? `${name.replace(/[^A-Za-z0-9._-]/g, '-')}@users.noreply.ctxagent.invalid`
  return { name, email }
}

/** deliver.branch with <key> (the issue's number or the task id), <uuid8> and <uuid> filled in. */
export function branchName(template: string, key: TaskKey, uuid: string): string {
  const id =
    key.task_id
      .replace(/[^A-Za-z0-9._-]+/g, '-')
      .replace(/^[-.]+|[-.]+$/g, '')
      .slice(0, 40) || 'task'
  return template.replaceAll('<key>', id).replaceAll('<uuid8>', uuid.slice(0, 8)).replaceAll('<uuid>', uuid)
}

async function validBranch(name: string, top: string): Promise<boolean> {
  if (name.startsWith('-')) return false
  return git(['check-ref-format', '--branch', name], { safeDir: top, cwd: '/' })
    .then(() => true)
    .catch(() => false)
}

function listed(problems: string[]): string {
  return `${problems.slice(0, 5).join('; ')}${problems.length > 5 ? `; and ${problems.length - 5} more` : ''}`
}

/** ctxagent's message: the answer's first line (masked) and the task. */
function commitMessage(input: DeliveryInput): string {
  return maskText(`${firstLine(input.answer)}\n\nctxagent task ${input.uuid}\n`)
}

function firstLine(text: string): string {
  const line =
    text
      .trim()
      .split('\n')
      .find((l) => l.trim() !== '') ?? 'Changes by ctxagent'
  const plain = line.replace(/^#+\s*/, '').trim()
  return plain.length > 100 ? `${plain.slice(0, 97)}...` : plain
}
