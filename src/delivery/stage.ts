import { chownSync, lstatSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { makeScratchDir } from '../storage/fs/scratch-dir.js'
import { git } from './git.js'
import type { GitOptions } from './git.js'
import type { RepositoryRecord } from './repository.js'

/** One path the change adds or modifies (deleted paths carry nothing out). */
export interface ChangedFile {
  path: string
  /** The new blob's id and size. */
  blob: string
  size: number
}

/**
 * A change staged in a git directory of delivery's own, outside the workspace
 * (docs/delivery.md#safety-in-an-agents-repository): its objects go there (the workspace's are read through
 * `alternates`), its index is its own, and its configuration is delivery's, so nothing
 * of the workspace's `.git/config` (filters, fsmonitor, hooks) is read while the
 * workspace's files are added. The workspace, its index and its checkout are not touched.
 */
export interface Staged {
  /** The git directory (a temporary directory; removed by `discard`). */
  gitDir: string
  /** The repository the task started with (docs/delivery.md#the-repository): its work tree's top and its common git directory. */
  top: string
  repoGitDir: string
  tree: string
  baseTree: string
  files: ChangedFile[]
  /** git in the staging directory, the workspace as its work tree. */
  run(args: readonly string[], more?: Partial<GitOptions>): Promise<string>
  discard(): void
}

/**
 * Stages the work tree's tracked and new files (.gitignore respected) over `base`, in the
 * repository recorded at the task's start: its top and git directories are the record's,
 * never what the workspace's `.git` names now.
 */
export async function stage(repo: RepositoryRecord, base: string): Promise<Staged> {
  const top = repo.top
  const repoGitDir = repo.common_dir.path
  const format = (await git(['rev-parse', '--show-object-format'], { safeDir: top, env: { GIT_DIR: repo.git_dir.path } }).catch(() => 'sha1')).trim()
  const gitDir = makeScratchDir('deliver')
  const env = { GIT_DIR: gitDir, GIT_WORK_TREE: top, GIT_INDEX_FILE: join(gitDir, 'index') }
  const run = (args: readonly string[], more: Partial<GitOptions> = {}) => git(args, { safeDir: top, cwd: top, ...more, env: { ...env, ...more.env } })
  const discard = () => rmSync(gitDir, { recursive: true, force: true })
  try {
    await git(['init', '--quiet', '--bare', '--template=', `--object-format=${format}`, gitDir], { safeDir: gitDir })
    // Delivery's own configuration, the whole of it: no filter, no fsmonitor, no hook is defined here.
    writeFileSync(
      join(gitDir, 'config'),
      `[core]\n\trepositoryformatversion = ${format === 'sha1' ? 0 : 1}\n\tbare = false\n\tfilemode = true\n\tsymlinks = true\n\tlogallrefupdates = false\n${format === 'sha1' ? '' : `[extensions]\n\tobjectformat = ${format}\n`}`,
    )
    writeFileSync(join(gitDir, 'objects', 'info', 'alternates'), `${join(repoGitDir, 'objects')}\n`)
    copyExclude(join(repoGitDir, 'info', 'exclude'), join(gitDir, 'info', 'exclude'))
    await run(['read-tree', base])
    await run(['add', '--all', '--', '.'])
    const tree = (await run(['write-tree'])).trim()
    const baseTree = (await run(['rev-parse', '--verify', `${base}^{tree}`])).trim()
    const files = tree === baseTree ? [] : await changedFiles(run, base)
    return { gitDir, top, repoGitDir, tree, baseTree, files, run, discard }
  } catch (err) {
    discard()
    throw err
  }
}

/** Added and modified paths against `base`, with their blobs' sizes. */
async function changedFiles(run: Staged['run'], base: string): Promise<ChangedFile[]> {
  const raw = (await run(['diff-index', '--cached', '-z', '--no-renames', '--abbrev=64', base])).split('\0')
  const out: { path: string; blob: string }[] = []
  for (let i = 0; i + 1 < raw.length; i += 2) {
    const fields = (raw[i] as string).split(' ')
    const status = fields[4] ?? ''
    if (status.startsWith('D')) continue
    // Submodule commits (mode 160000) carry no file content.
    if (fields[1] === '160000') continue
    out.push({ path: raw[i + 1] as string, blob: fields[3] as string })
  }
  if (out.length === 0) return []
  const sizes = (await run(['cat-file', '--batch-check=%(objectname) %(objectsize)'], { input: `${out.map((f) => f.blob).join('\n')}\n` })).trim().split('\n')
  const size = new Map(sizes.map((line) => line.split(' ') as [string, string]).map(([id, n]) => [id, Number(n)]))
  return out.map((f) => ({ ...f, size: size.get(f.blob) ?? 0 }))
}

/** The lines a path's change adds (its new content, for a new file), for the secret scan. */
export async function addedText(staged: Staged, base: string, path: string): Promise<string> {
  const patch = await staged.run([
    'diff-index',
    '--cached',
    '-p',
    '-U0',
    '--text',
    '--no-color',
    '--no-ext-diff',
    '--no-textconv',
    '--no-renames',
    base,
    '--',
    `:(literal)${path}`,
  ])
  const lines = patch.split('\n')
  const first = lines.findIndex((l) => l.startsWith('@@'))
  if (first < 0) return ''
  return lines
    .slice(first)
    .filter((l) => l.startsWith('+'))
    .map((l) => l.slice(1))
    .join('\n')
}

/**
 * The repository's own ignore list (its info/exclude, in the common git directory, the one
 * a worktree's git reads too), when it is a regular file. The staging directory is made
 * without git's template, so it has no `info/` until this makes it.
 */
function copyExclude(from: string, to: string): void {
  try {
    if (!lstatSync(from).isFile()) return
    mkdirSync(dirname(to), { recursive: true })
    writeFileSync(to, readFileSync(from))
  } catch {
    // None.
  }
}

/** As root, hands the staging directory to the workspace's owner (it fetches from there into its own repository). */
export function giveTo(dir: string, uid: number, gid: number): void {
  const walk = (path: string): void => {
    chownSync(path, uid, gid)
    if (lstatSync(path).isDirectory()) for (const name of readdirSync(path)) walk(join(path, name))
  }
  walk(dir)
}
