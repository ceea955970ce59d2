import { existsSync, mkdirSync, readdirSync, readFileSync, realpathSync, rmSync, statSync } from 'node:fs'
import { join, relative, resolve, sep } from 'node:path'
import { git } from '../delivery/git.js'
import type { GitOptions } from '../delivery/git.js'
import { readMetadata } from '../storage/task/metadata.js'
import type { StartsFrom } from '../storage/task/metadata.js'
import { giveWorkspace } from '../tools/sandbox/identity.js'
import type { SandboxIdentity } from '../tools/sandbox/identity.js'

/** A delivering task's tree: where its agent works, and what it starts from (metadata.run.starts_from). */
export interface TaskTree {
  workspace: string
  startsFrom: StartsFrom
  /** True when this call made the worktree (a task that then fails to start removes it). */
  made: boolean
}

/**
 * The tree of its own a delivering task works on (docs/delivery.md#what-a-task-starts-from),
 * so that nothing but the agent's change is delivered: an operator's uncommitted or
 * untracked files are never read into it, and one task's leftovers never reach another's.
 *
 * - on a pull request's head branch (`onPullHead`): the checkout made for it, as it is;
 * - in the fleet's `--repo` clone made for this task (`<workspacesDir>/<uuid>`): the clone;
 * - anywhere else: a git worktree at `commit` (the checkout's HEAD, read before), detached,
 *   kept in the repository's git directory as `<git dir>/ctxagent/worktrees/task-<uuid>`
 *   (the next attempt or a resume finds it there), written by git as that directory's
 *   owner and then given to the user the task's commands run as. The checkout's branch,
 *   index and files are not touched.
 *
 * A workspace below the repository's top level is the same directory of the worktree.
 */
export async function taskTree(options: {
  workspace: string
  uuid: string
  commit: string
  workspacesDir: string | null
  onPullHead: boolean
  identity: SandboxIdentity
}): Promise<TaskTree> {
  const { workspace, uuid, commit } = options
  const read = (args: string[]) => git(args, { safeDir: workspace, cwd: workspace }).then((s) => s.trim())
  const top = await read(['rev-parse', '--show-toplevel'])
  if (options.onPullHead) return { workspace, startsFrom: { kind: 'pr-head', workspace, commit }, made: false }
  if (options.workspacesDir !== null && samePath(top, join(options.workspacesDir, uuid)))
    return { workspace, startsFrom: { kind: 'clone', workspace, commit }, made: false }
  const gitDir = realpathSync(await read(['rev-parse', '--path-format=absolute', '--git-common-dir']))
  const dir = join(gitDir, 'ctxagent', 'worktrees', `task-${uuid}`)
  const below = relative(top, workspace)
  let made = false
  if (!existsSync(join(dir, '.git'))) {
    const owner = ownerOf(gitDir)
    const asOwner: Partial<GitOptions> = owner === null ? {} : owner
    // What git writes into the repository's git directory (the worktree's record, its parent directories) stays its owner's.
    await git(['worktree', 'add', '--quiet', '--detach', '--no-checkout', dir, commit], { safeDir: top, cwd: top, ...asOwner })
    made = true
    // The checkout runs no filter the repository's configuration names (hooks and fsmonitor are off in every git call).
    await git(['reset', '--quiet', '--hard', commit], {
      safeDir: dir,
      cwd: dir,
      ...asOwner,
      config: await filtersOff(top),
    })
    giveWorkspace(dir, options.identity)
  }
  const tree = realpathSync(dir)
  const place = join(tree, below)
  if (!existsSync(place)) {
    // A workspace directory the commit does not track (empty, or untracked files only): made, empty, in the tree.
    mkdirSync(place, { recursive: true })
    giveWorkspace(place, options.identity)
  }
  return { workspace: realpathSync(place), startsFrom: { kind: 'worktree', workspace, commit, worktree: tree, git_dir: gitDir }, made }
}

/**
 * Removes a task's worktree (the directory and its record in the repository's git
 * directory, as `git worktree remove` would), never trusting the worktree's own `.git`
 * file, which its agent could have rewritten: the record removed is the one whose
 * `gitdir` names this worktree. A path outside `<git dir>/ctxagent/worktrees/` is left
 * alone. Returns whether there was one to remove.
 */
export function removeTaskTree(from: StartsFrom | undefined): boolean {
  if (from?.kind !== 'worktree' || from.worktree === undefined || from.git_dir === undefined) return false
  const home = join(from.git_dir, 'ctxagent', 'worktrees') + sep
  if (!from.worktree.startsWith(home) || from.worktree.includes(`${sep}..`)) return false
  const existed = existsSync(from.worktree)
  rmSync(from.worktree, { recursive: true, force: true })
  const records = join(from.git_dir, 'worktrees')
  let names: string[] = []
  try {
    names = readdirSync(records)
  } catch {
    return existed
  }
  for (const name of names) {
    const gitdir = readIfFile(join(records, name, 'gitdir'))
    if (gitdir !== null && resolve(gitdir.trim()) === join(from.worktree, '.git')) rmSync(join(records, name), { recursive: true, force: true })
  }
  return existed
}

/** The worktree a task's metadata records (undefined: none, or metadata that cannot be read). */
export function taskTreeOf(taskDir: string): StartsFrom | undefined {
  try {
    const from = readMetadata(taskDir).run?.starts_from
    return from?.kind === 'worktree' ? from : undefined
  } catch {
    return undefined
  }
}

/** The line `run` says at start: what the task works on, and what it does not see. */
export function startsFromText(from: StartsFrom): string {
  const at = from.commit.slice(0, 12)
  if (from.kind === 'worktree')
    return `starts from commit ${at} of ${from.workspace}, in a worktree of its own (${from.worktree}): the checkout's uncommitted and untracked files are not in it, and the checkout is not touched`
  if (from.kind === 'clone') return `starts from commit ${at} in its own clone ${from.workspace}`
  return `starts from the pull request's head (commit ${at}) checked out in ${from.workspace}`
}

/** `-c` settings that empty every filter driver the repository's configuration defines (a checkout would run them). */
async function filtersOff(top: string): Promise<string[]> {
  const listed = await git(['config', '--get-regexp', '^filter\\..*\\.(clean|smudge|process)$'], { safeDir: top, cwd: top }).catch(() => '')
  const names = new Set(
    listed
      .split('\n')
      .map((line) => /^filter\.(.+)\.(?:clean|smudge|process) /.exec(line)?.[1])
      .filter((n): n is string => n !== undefined),
  )
  return [...names].flatMap((n) => [`filter.${n}.clean=`, `filter.${n}.smudge=`, `filter.${n}.process=`, `filter.${n}.required=false`])
}

/** As root, the owner of a git directory that is not root's (git then writes there as that user). */
function ownerOf(dir: string): { uid: number; gid: number } | null {
  if (process.getuid?.() !== 0) return null
  const { uid, gid } = statSync(dir)
  return uid === 0 ? null : { uid, gid }
}

function samePath(a: string, b: string): boolean {
  try {
    return realpathSync(a) === realpathSync(b)
  } catch {
    return false
  }
}

function readIfFile(path: string): string | null {
  try {
    return readFileSync(path, 'utf8')
  } catch {
    return null
  }
}
