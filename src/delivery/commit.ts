import { git } from './git.js'
import type { RepositoryRecord } from './repository.js'
import { giveTo } from './stage.js'
import type { Staged } from './stage.js'

/** What ctxagent's commit is made of (docs/contract.md §13.4): never anything of the agent's but the tree. */
export interface CommitPlan {
  /** The one parent: the base the task started from, or the PR head as fetched from the forge then. */
  parent: string
  /** The commit an earlier attempt of this delivery made, as the task's state recorded it before the push (null: none). */
  made: string | null
  name: string
  email: string
  message: string
}

/**
 * ctxagent's commit of the staged tree, in the staging directory, on `ref` there: the
 * recorded one of an earlier attempt when it is still the commit of this tree over this
 * parent, else a new one. Never a commit found in the workspace: the agent's commits
 * (their parents, authors and messages) are at most where the tree's files came from.
 */
export async function ctxagentCommit(staged: Staged, plan: CommitPlan, ref: string): Promise<string> {
  const commit = plan.made !== null && (await isCommitOf(staged, plan.made, plan.parent)) ? plan.made : await newCommit(staged, plan)
  await staged.run(['update-ref', ref, commit])
  return commit
}

async function isCommitOf(staged: Staged, commit: string, parent: string): Promise<boolean> {
  const shape = await staged.run(['show', '-s', '--format=%T %P', `${commit}^{commit}`]).catch(() => '')
  return shape.trim() === `${staged.tree} ${parent}`
}

async function newCommit(staged: Staged, plan: CommitPlan): Promise<string> {
  const identity = { GIT_AUTHOR_NAME: plan.name, GIT_AUTHOR_EMAIL: plan.email, GIT_COMMITTER_NAME: plan.name, GIT_COMMITTER_EMAIL: plan.email }
  const made = await staged.run(['commit-tree', '--no-gpg-sign', staged.tree, '-p', plan.parent, '-F', '-'], { env: identity, input: plan.message })
  return made.trim()
}

/**
 * Puts the commit on `ref` in the repository the task started with (its recorded git
 * directory, never what `.git` names now) by a fetch from the staging directory. Every
 * write runs as the owner of the directory it writes into (docs/delivery.md#safety-in-an-agents-repository):
 * objects and refs as the common directory's, a worktree's index as its own git
 * directory's. `replace`: the ref may hold a commit of the agent's (the task's own branch,
 * or the PR head's checkout): ctxagent's takes its place.
 */
export async function placeInRepository(staged: Staged, repo: RepositoryRecord, ref: string, commit: string, replace: boolean): Promise<void> {
  const gitDir = repo.git_dir.path
  const current = (await git(['symbolic-ref', '--quiet', 'HEAD'], { safeDir: repo.top, env: { GIT_DIR: gitDir } }).catch(() => '')).trim()
  const writer = ownerOf(repo.common_dir)
  if (writer !== null) giveTo(staged.gitDir, writer.uid, writer.gid)
  await git(
    [
      'fetch',
      '--quiet',
      '--no-tags',
      '--no-write-fetch-head',
      '--no-recurse-submodules',
      ...(current === ref ? ['--update-head-ok'] : []),
      staged.gitDir,
      `${replace || current === ref ? '+' : ''}${ref}:${ref}`,
    ],
    // The repository's config may rewrite URLs (url.<base>.insteadOf); the longest match wins, and this one is the whole path.
    { safeDir: repo.top, env: { GIT_DIR: gitDir }, ...(writer ?? {}), config: [`url.${staged.gitDir}.insteadOf=${staged.gitDir}`] },
  )
  // On the checked-out branch the commit is the checkout's own now: its index follows (the files are already the commit's).
  if (current === ref)
    await git(['read-tree', commit], { safeDir: repo.top, env: { GIT_DIR: gitDir, GIT_WORK_TREE: repo.top }, ...(ownerOf(repo.git_dir) ?? {}) })
}

/** As root, the owner of a directory that is not root's (git then runs as that user); null: run as ctxagent is. */
function ownerOf(dir: { uid: number; gid: number }): { uid: number; gid: number } | null {
  if (process.getuid?.() !== 0 || dir.uid === 0) return null
  return { uid: dir.uid, gid: dir.gid }
}
