import { lstatSync, readFileSync, realpathSync, statSync } from 'node:fs'
import { isAbsolute, join, resolve } from 'node:path'
import { UsageError } from '../errors.js'
import type { DirIdentity, RepositoryRecord } from '../storage/task/metadata.js'
import { git } from './git.js'

export type { RepositoryRecord }

/**
 * Keys of the agent-writable config (`config`, `config.worktree`) that name a path git
 * follows to another place as the repository: a work tree elsewhere, or config read from
 * another file. Programs the config names (hooks, fsmonitor, filters, …) run in no
 * command delivery makes (git.ts); these would change what repository it acts on.
 */
const WORKTREE_KEY = /^core\.worktree$/i
const INCLUDE_KEY = /^(include\.path|includeif\..+\.path)$/i

/** Reads the record at task start; a repository delivery cannot work with is refused then (a usage error). */
export async function recordRepository(workspace: string): Promise<RepositoryRecord> {
  const read = (args: string[]) => git(args, { safeDir: workspace, cwd: workspace }).then((s) => s.trim())
  const gitDir = realpathSync(await read(['rev-parse', '--absolute-git-dir']))
  const commonDir = realpathSync(resolve(workspace, await read(['rev-parse', '--path-format=absolute', '--git-common-dir'])))
  const config = await configOf(gitDir, commonDir)
  if (config.some(([key]) => WORKTREE_KEY.test(key)))
    throw new UsageError(
      `the workspace's repository sets core.worktree: delivery works in the workspace itself (${workspace})`,
      'unset it (git config --unset core.worktree), or run without --deliver',
    )
  const top = realpathSync(await read(['rev-parse', '--show-toplevel']))
  const dotgit = kindOf(join(top, '.git'))
  if (dotgit === null || gitDirNamedBy(top, dotgit) !== gitDir)
    throw new UsageError(`the workspace's repository has its git directory elsewhere than ${top}/.git names`, 'run without --deliver')
  return {
    top,
    dotgit,
    git_dir: identityOf(gitDir),
    common_dir: identityOf(commonDir),
    alternates: alternatesOf(commonDir),
    includes: includesOf(config),
  }
}

/**
 * Null when the workspace's repository is still the one recorded at start, else why
 * delivery refuses it (docs/delivery.md#the-repository): `.git` replaced (by a gitfile, a
 * link, another directory), a worktree's `commondir` or the `alternates` changed, or a
 * path-bearing key set in the config. Nothing is read through the workspace's `.git` here
 * but the files named, each checked before it is believed.
 */
export async function repositoryChanged(record: RepositoryRecord): Promise<string | null> {
  const dotgit = join(record.top, '.git')
  const kind = kindOf(dotgit)
  const now = kind === null ? 'gone' : kind === 'directory' ? 'a directory' : kind === 'gitfile' ? 'a gitfile' : 'a symbolic link'
  if (kind !== record.dotgit) return `the workspace's .git is ${now} now, not what the task started with: not delivered`
  const named = gitDirNamedBy(record.top, kind)
  if (named !== record.git_dir.path) return `the workspace's .git names another git directory (${named ?? 'none'}) than the task started with: not delivered`
  for (const [was, what] of [
    [record.git_dir, 'git directory'],
    [record.common_dir, 'common git directory'],
  ] as const) {
    const why = sameDir(was)
    if (why !== null) return `the repository's ${what} ${was.path} ${why} since the task started: not delivered`
  }
  if (commonDirOf(record.git_dir.path) !== record.common_dir.path)
    return `the repository's commondir names another repository than the task started with: not delivered`
  if (alternatesOf(record.common_dir.path) !== record.alternates)
    return `the repository's objects/info/alternates changed since the task started: not delivered`
  const config = await configOf(record.git_dir.path, record.common_dir.path).catch(() => null)
  if (config === null) return `the repository's config is not one git reads: not delivered`
  const worktree = config.find(([key]) => WORKTREE_KEY.test(key))
  if (worktree !== undefined) return `the repository's config sets core.worktree (${worktree[1]}): not delivered`
  const includes = includesOf(config)
  const added = includes.find((i) => !record.includes.includes(i)) ?? record.includes.find((i) => !includes.includes(i))
  if (added !== undefined) return `the repository's config changed ${added.split('=')[0]} since the task started: not delivered`
  return null
}

function kindOf(path: string): RepositoryRecord['dotgit'] | null {
  try {
    const st = lstatSync(path)
    return st.isSymbolicLink() ? 'symlink' : st.isDirectory() ? 'directory' : st.isFile() ? 'gitfile' : null
  } catch {
    return null
  }
}

/** The git directory `<top>/.git` leads to, resolved (null: none). */
function gitDirNamedBy(top: string, kind: RepositoryRecord['dotgit']): string | null {
  const dotgit = join(top, '.git')
  try {
    if (kind !== 'gitfile') return realpathSync(dotgit)
    const line = /^gitdir: (.+)$/m.exec(readFileSync(dotgit, 'utf8'))?.[1]?.trim()
    return line === undefined ? null : realpathSync(isAbsolute(line) ? line : resolve(top, line))
  } catch {
    return null
  }
}

function commonDirOf(gitDir: string): string | null {
  try {
    const named = readFileSync(join(gitDir, 'commondir'), 'utf8').trim()
    return realpathSync(resolve(gitDir, named))
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'ENOENT' ? gitDir : null
  }
}

function identityOf(path: string): DirIdentity {
  const st = statSync(path, { bigint: true })
  return { path, uid: Number(st.uid), gid: Number(st.gid), dev: String(st.dev), ino: String(st.ino) }
}

/** Why `was` is not the same directory now (null: it is): replaced, or given to another owner. */
function sameDir(was: DirIdentity): string | null {
  const st = lstatSync(was.path, { bigint: true, throwIfNoEntry: false })
  if (st === undefined) return 'is gone'
  if (!st.isDirectory() || String(st.dev) !== was.dev || String(st.ino) !== was.ino) return 'was replaced'
  if (Number(st.uid) !== was.uid) return `changed owner (uid ${was.uid} then, ${st.uid} now)`
  return null
}

function alternatesOf(commonDir: string): string | null {
  try {
    return readFileSync(join(commonDir, 'objects', 'info', 'alternates'), 'utf8')
  } catch {
    return null
  }
}

/**
 * The keys and values of the repository's own config files, as git reads them (no
 * include followed): the common `config`, and each `config.worktree`. A file git cannot
 * read is an error: delivery's own git would stop on it too.
 */
async function configOf(gitDir: string, commonDir: string): Promise<[string, string][]> {
  const files = [...new Set([join(commonDir, 'config'), join(commonDir, 'config.worktree'), join(gitDir, 'config.worktree')])]
  const out: [string, string][] = []
  for (const file of files) {
    if (kindOf(file) === null) continue
    const text = await git(['config', '--file', file, '--no-includes', '--null', '--list'], { safeDir: gitDir })
    for (const entry of text.split('\0')) {
      if (entry === '') continue
      const newline = entry.indexOf('\n')
      out.push(newline < 0 ? [entry, 'true'] : [entry.slice(0, newline), entry.slice(newline + 1)])
    }
  }
  return out
}

function includesOf(config: [string, string][]): string[] {
  return config
    .filter(([key]) => INCLUDE_KEY.test(key))
    .map(([key, value]) => `${key}=${value}`)
    .sort()
}
