import { statSync } from 'node:fs'
import type { Config } from '../config/schema.js'
import { itemTitle, openChangeRequest } from '../sources/change-request.js'
import { marker } from '../sources/marker.js'
import { maskText } from '../storage/format/mask.js'
import type { DeliveryTarget, TaskKey } from '../storage/task/metadata.js'
import { pauseAtForTest } from '../test-pause.js'
import { refusals } from './checks.js'
import { git } from './git.js'
import { forgeOf, notTheTaskRepository, push } from './push.js'
import { fileChanges, prBody } from './pr-body.js'
import type { TaskFacts } from './pr-body.js'
import { giveTo, stage } from './stage.js'
import type { Staged } from './stage.js'

export interface DeliveryInput {
  config: Config
  mode: 'branch' | 'pr'
  workspace: string
  /** What the task started from (metadata's run record). */
  base: { commit: string; branch: string | null; remote: string | null }
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
 * Delivers a completed task's change (docs/delivery.md): commits the workspace's files on
 * a branch of the workspace's repository without moving its checkout, and with mode pr
 * pushes it and opens a PR/MR (or, on a PR's head branch, pushes one more commit there).
 * Idempotent: a second call after a crash finds the branch and the PR it made. Never
 * throws for the change or the forge: what went wrong is the outcome's `refused`.
 */
export async function deliver(input: DeliveryInput): Promise<DeliveryOutcome> {
  const branch = input.target.kind === 'pr-head' ? input.target.branch : branchName(input.config.deliver.branch, input.key, input.uuid)
  const outcome: DeliveryOutcome = { mode: input.mode, branch: null, commit: null, pushed: false, pr: null, refused: null }
  const refuse = (why: string): DeliveryOutcome => ({ ...outcome, refused: maskText(why) })
  if (!(await validBranch(branch, input.workspace))) return refuse(`the branch name ${branch} is not a valid git branch name (deliver.branch)`)
  let staged: Staged | null = null
  try {
    staged = await stage(input.workspace, input.base.commit)
    if (staged.tree === staged.baseTree) return refuse('no changes: the workspace holds nothing to commit over the commit the task started from')
    const problems = await refusals(staged, input.base.commit, { exclude: input.config.deliver.exclude, maxFileBytes: input.config.deliver.max_file_bytes })
    if (problems.length > 0)
      return refuse(
        `not delivered: ${problems.slice(0, 5).join('; ')}${problems.length > 5 ? `; and ${problems.length - 5} more` : ''}. The workspace keeps the files.`,
      )
    const commit = await commitOnBranch(staged, input, branch)
    Object.assign(outcome, { branch, commit })
    if (typeof commit !== 'string') return refuse(commit.refused)
    await pauseAtForTest('deliver-committed')
    if (input.mode === 'branch') return outcome
    if (input.base.remote === null) return refuse('the workspace had no origin when the task started; the branch is committed, not pushed')
    const elsewhere = notTheTaskRepository(input.config, input.key, input.base.remote)
    if (elsewhere !== null) return refuse(elsewhere)
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

/**
 * The commit of the change on `branch`, in the workspace's repository: the one an earlier
 * attempt made (same tree, same parent) when there is one, else a new one. Its objects
 * and the branch reach the workspace's repository by a fetch from the staging directory,
 * run (as root) as the workspace's owner, so what it writes into `.git` stays its files.
 */
async function commitOnBranch(staged: Staged, input: DeliveryInput, branch: string): Promise<string | { refused: string }> {
  const ref = `refs/heads/${branch}`
  const existing = (await staged.run(['rev-parse', '--verify', '--quiet', `${ref}^{commit}`], { env: { GIT_DIR: staged.repoGitDir } }).catch(() => '')).trim()
  if (existing !== '' && existing !== input.base.commit) {
    const [tree, parent] = (await staged.run(['show', '-s', '--format=%T %P', existing], { env: { GIT_DIR: staged.repoGitDir } })).trim().split(' ')
    if (tree === staged.tree && parent === input.base.commit) {
      // An earlier attempt's commit: the staging directory names it too (its objects are the workspace's).
      await staged.run(['update-ref', ref, existing])
      return existing
    }
    return {
      refused:
        input.target.kind === 'pr-head'
          ? `the branch ${branch} moved since the task started; nothing pushed (no force-push)`
          : `a branch ${branch} already exists with another commit; nothing overwritten`,
    }
  }
  const author = input.config.deliver.author
  const name = author.name ?? input.config.github.bot_name ?? input.config.gitlab.bot_name ?? 'ctxagent'
  const email = author.email ?? `${name.replace(/[^A-Za-z0-9._-]/g, '-')}@users.noreply.ctxagent.invalid`
  const identity = { GIT_AUTHOR_NAME: name, GIT_AUTHOR_EMAIL: email, GIT_COMMITTER_NAME: name, GIT_COMMITTER_EMAIL: email }
  const message = `${firstLine(input.answer)}\n\nctxagent task ${input.uuid}\n`
  const commit = (
    await staged.run(['commit-tree', '--no-gpg-sign', staged.tree, '-p', input.base.commit, '-F', '-'], { env: identity, input: maskText(message) })
  ).trim()
  await staged.run(['update-ref', ref, commit])
  // The repository's git directory's owner, not the work tree's: a task's worktree is its sandbox user's.
  const owner = ownerOf(staged.repoGitDir)
  if (owner !== null) giveTo(staged.gitDir, owner.uid, owner.gid)
  const asOwner = owner === null ? {} : owner
  const current = (await git(['symbolic-ref', '--quiet', 'HEAD'], { safeDir: staged.top, cwd: input.workspace }).catch(() => '')).trim()
  await git(
    [
      'fetch',
      '--quiet',
      '--no-tags',
      '--no-write-fetch-head',
      '--no-recurse-submodules',
      ...(current === ref ? ['--update-head-ok'] : []),
      staged.gitDir,
      `${ref}:${ref}`,
    ],
    // The workspace's config may rewrite URLs (url.<base>.insteadOf); the longest match wins, and this one is the whole path.
    { safeDir: staged.top, cwd: input.workspace, ...asOwner, config: [`url.${staged.gitDir}.insteadOf=${staged.gitDir}`] },
  )
  // On a PR's head branch the commit is the checkout's own now: its index follows (the files are already the commit's).
  if (current === ref) await git(['read-tree', commit], { safeDir: staged.top, cwd: input.workspace, ...asOwner })
  return commit
}

/** As root, the owner of a workspace that is not root's (git then runs as that user). */
function ownerOf(dir: string): { uid: number; gid: number } | null {
  if (process.getuid?.() !== 0) return null
  const { uid, gid } = statSync(dir)
  return uid === 0 ? null : { uid, gid }
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

async function validBranch(name: string, workspace: string): Promise<boolean> {
  if (name.startsWith('-')) return false
  return git(['check-ref-format', '--branch', name], { safeDir: workspace, cwd: '/' })
    .then(() => true)
    .catch(() => false)
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
