import { createHash } from 'node:crypto'
import { lstatSync, realpathSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { readRegularFile } from '../input-file.js'
import { git, gitScript } from '../delivery/git.js'

/*
 * The trusted base of a task's repository (docs/environments.md#where-it-is-read-from):
 * what a pull request's author or an earlier agent cannot have changed. ctxagent reads
 * the repository's own settings (its environment file; next, its instructions) from
 * there, never from the task's branch or a PR head. Every git call is delivery's safe git
 * (no hooks, fsmonitor, filters, replace objects or host configuration).
 */

/** Where a repository's trusted files are read from. */
export type TrustedBase =
  /**
   * A commit of the default branch: `ref` names it as read (origin/HEAD, origin/main, origin/master, or HEAD of a
   * repository without origin). `listed`: the entries of the paths asked for ahead (trustedBase's `ahead`), each
   * ls-tree's line or null when the commit has no such path, so that reading them costs no git call more.
   */
  | { kind: 'commit'; commit: string; ref: string; listed?: Readonly<Record<string, string | null>> }
  /** Not a git repository: the workspace's own files (the operator's directory), said so in the task. */
  | { kind: 'workspace' }
  /** A repository with an origin whose default branch is not known here: nothing is read from it. */
  | { kind: 'none'; why: string }

/** The default branch's refs tried in order; a repository without an origin is the operator's own, and its HEAD is the base. */
const DEFAULT_REFS = ['refs/remotes/origin/HEAD', 'refs/remotes/origin/main', 'refs/remotes/origin/master']

/**
 * The first round, one process from Node (gitScript): whether the workspace is in a work tree
 * (`inside` or `outside`), the candidate refs as commits (one cat-file, fed the candidates: a
 * line each, `<id> commit <size>`, `<name> missing` or another type's line), the line
 * `cat-file <its exit status>`, then `origin ` and the rest of the output, the origin's URL as
 * git prints it (a value may hold newlines: it is last, so nothing after it is misread). The
 * script is ctxagent's constant; the workspace is only its directory.
 */
const ROUND_ONE = [
  'git "$@" rev-parse --show-toplevel </dev/null >/dev/null 2>&1 || { echo outside; exit 0; }',
  'echo inside',
  'git "$@" cat-file --batch-check 2>/dev/null',
  'echo "cat-file $?"',
  "printf 'origin '",
  'git "$@" config --get remote.origin.url </dev/null 2>/dev/null',
  'exit 0',
].join('\n')

/** What ROUND_ONE printed: null when it did not run to its end (then nothing of the repository is trusted). */
function roundOne(out: string, candidates: readonly string[]): { inside: boolean; commits: Map<string, string | null>; origin: string } | null {
  if (out === 'outside\n') return { inside: false, commits: new Map(), origin: '' }
  if (!out.startsWith('inside\n')) return null
  const marker = out.indexOf('\ncat-file ')
  const originAt = out.indexOf('\norigin ', marker + 1)
  if (marker < 0 || originAt < 0) return null
  const listed = out
    .slice('inside\n'.length, marker + 1)
    .split('\n')
    .slice(0, -1)
  // cat-file answered every candidate, in order, and exited 0; else no candidate counts (as when it cannot run).
  const whole = out.slice(marker + 1, originAt) === 'cat-file 0' && listed.length === candidates.length
  const commits = new Map(candidates.map((ref, i) => [ref, whole ? (/^([0-9a-f]{40,64}) commit \d+$/.exec(listed[i] as string)?.[1] ?? null) : null] as const))
  return { inside: true, commits, origin: out.slice(originAt + '\norigin '.length) }
}

/**
 * Finds the trusted base of `workspace` before anything of the task runs there, and lists
 * `ahead` (paths from the repository's root) at it. Two rounds of git, whatever the
 * repository: the worktree's top, the candidate refs and the origin's URL asked in one
 * process (three gits forked by sh: from Node, each fork cost the main thread ~15 ms on a
 * loaded host), then one ls-tree of the paths. One git call after another cost a fleet
 * job ~100 ms each of its start on a loaded host (docs/fleet.md#dispatch-latency).
 */
export async function trustedBase(workspace: string, ahead: readonly string[] = []): Promise<TrustedBase> {
  if (outsideAnyRepository(workspace)) return { kind: 'workspace' }
  const options = { safeDir: '*', cwd: workspace }
  const candidates = [...DEFAULT_REFS, 'HEAD']
  const input = candidates.map((ref) => `${ref}^{commit}\n`).join('')
  const asked = await gitScript(ROUND_ONE, { ...options, input }).then(
    (out) => roundOne(out, candidates),
    () => null,
  )
  // A repository is in sight (outsideAnyRepository found its entry): when git could not be asked, nothing is read from it.
  if (asked === null) return { kind: 'none', why: 'git could not be asked about its repository' }
  if (!asked.inside) return { kind: 'workspace' }
  const { commits, origin } = asked
  const found = DEFAULT_REFS.find((ref) => (commits.get(ref) ?? null) !== null)
  const base = (commit: string, ref: string): Promise<TrustedBase> => listAhead(workspace, { kind: 'commit', commit, ref }, ahead)
  if (found !== undefined) return base(commits.get(found) as string, found.replace(/^refs\/remotes\//, ''))
  if (origin.trim() !== '') return { kind: 'none', why: "its origin's default branch is not known here (no origin/HEAD, origin/main or origin/master)" }
  const head = commits.get('HEAD') ?? null
  return head === null ? { kind: 'none', why: 'it has no commit yet' } : base(head, 'HEAD')
}

/**
 * True only when git cannot find a repository for `workspace`: neither it nor any directory
 * above it has an entry named `.git` (a repository's directory, or a file naming one) or
 * `HEAD` (the directory may itself be a git directory, bare or with core.worktree set).
 * That is where git's discovery looks, and delivery's safe git has none of the GIT_*
 * variables that could point it elsewhere (src/delivery/git.ts), so git would answer "not a
 * repository" too; three git processes cost `run` in a plain directory about 50 ms of CPU
 * before its first request (docs/development.md#start-up). Anything else — such an entry,
 * a directory that cannot be read, a workspace that cannot be resolved — is false, and git
 * decides as before. The workspace is the operator's here: nothing of the task has run.
 */
export function outsideAnyRepository(workspace: string): boolean {
  let dir: string
  try {
    dir = realpathSync(workspace)
  } catch {
    return false
  }
  for (;;) {
    for (const name of ['.git', 'HEAD']) {
      try {
        lstatSync(join(dir, name))
        return false
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'ENOENT') return false
      }
    }
    const up = dirname(dir)
    if (up === dir) return true
    dir = up
  }
}

/** `base` with the entries of `paths` listed (one ls-tree); as it was when git cannot list them (each is then read on its own). */
async function listAhead(workspace: string, base: Extract<TrustedBase, { kind: 'commit' }>, paths: readonly string[]): Promise<TrustedBase> {
  if (paths.length === 0) return base
  const out = await git(['ls-tree', '-l', '-z', '--end-of-options', base.commit, '--', ...paths], { safeDir: '*', cwd: workspace }).catch(() => null)
  if (out === null) return base
  const lines = new Map(out.split('\0').map((line) => [line.slice(line.indexOf('\t') + 1), line] as const))
  return { ...base, listed: Object.fromEntries(paths.map((path) => [path, lines.get(path) ?? null])) }
}

/** What a read of a trusted file found; `id` names the content read: its git blob id at a commit, `sha256:<hex>` of a workspace's own file. */
export type TrustedRead = { kind: 'file'; text: string; id: string } | { kind: 'absent' } | { kind: 'refused'; why: string }

/**
 * The file at `path` (relative to the repository's root) in the trusted base: a regular
 * file of at most `maxBytes`, never a link (a link could point anywhere the reader can
 * read). In a workspace that is not a repository, the workspace's own regular file.
 */
export async function readTrusted(workspace: string, base: TrustedBase, path: string, maxBytes: number): Promise<TrustedRead> {
  if (base.kind === 'none') return { kind: 'absent' }
  if (base.kind === 'workspace') return readOwnFile(workspace, path, maxBytes)
  const options = { safeDir: '*', cwd: workspace }
  const listed = base.listed?.[path]
  const line = listed !== undefined ? (listed ?? '') : await git(['ls-tree', '-l', '--end-of-options', base.commit, '--', path], options).catch(() => '')
  const match = /^(\d{6}) (\w+) ([0-9a-f]+) +(\d+|-)\t/.exec(line)
  if (match === null) return { kind: 'absent' }
  const [, mode, type, object, size] = match
  if (type !== 'blob' || (mode !== '100644' && mode !== '100755')) return { kind: 'refused', why: `${path} is not a regular file at ${base.ref}` }
  if (Number(size) > maxBytes) return { kind: 'refused', why: `${path} is larger than ${maxBytes} bytes at ${base.ref}` }
  const text = await git(['cat-file', 'blob', object as string], { ...options, maxBuffer: maxBytes + 1 })
  return { kind: 'file', text, id: object as string }
}

function readOwnFile(workspace: string, path: string, maxBytes: number): TrustedRead {
  const full = join(workspace, path)
  try {
    // A link in the workspace is refused as one at a commit is.
    if (lstatSync(full).isSymbolicLink()) return { kind: 'refused', why: `${path} is a symbolic link` }
  } catch {
    return { kind: 'absent' }
  }
  const read = readRegularFile(full, maxBytes)
  if (read.ok) return { kind: 'file', text: read.text, id: `sha256:${createHash('sha256').update(read.text).digest('hex')}` }
  if (read.problem === 'size') return { kind: 'refused', why: `${path} is larger than ${maxBytes} bytes` }
  return { kind: 'refused', why: `${path} is not a readable regular file` }
}

/** How a base is named in a task's records and notes. */
export function describeBase(base: TrustedBase): string {
  if (base.kind === 'commit') return `${base.ref} at ${base.commit.slice(0, 12)}`
  if (base.kind === 'workspace') return "the workspace's own files (not a git repository)"
  return `nothing (${base.why})`
}
