import { execFile } from 'node:child_process'
import { existsSync, mkdtempSync, realpathSync, rmSync, statSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { isAbsolute, join, resolve } from 'node:path'
import { CtxError } from '../errors.js'
import type { PrHead } from '../storage/task/metadata.js'
import type { CloneCredential } from './clone.js'
import { credentialFor, gitEnv, HELPER } from './clone.js'
import { chownTree } from './environment/checkout.js'
import { validRef } from './ref.js'

/**
 * A task on a pull request works on its head branch (docs/delivery.md#the-review-loop):
 *
 * - in the `--repo` clone the fleet made for this task (fleet.workspaces_dir/<uuid>), the
 *   branch is checked out in place: the clone is the task's own;
 * - in any other repository (an operator's checkout), in a git worktree of it, kept in
 *   its git directory (`<git dir>/ctxagent/worktrees/<forge>-<number>`): the operator's
 *   branch, index and files stay as they are, and the next follow-up on the same pull
 *   request finds the worktree again;
 * - a workspace that is not a git repository is worked in as it is (no head to push to).
 *
 * Every git command here runs in a repository an agent may have written to (its config,
 * hooks, attributes): see `safeGit`. Every one that writes into the repository's git
 * directory (a fetch, a checkout, a worktree added) runs as that directory's owner, as
 * delivery's writes do (docs/delivery.md#the-review-loop): what it writes stays that user's,
 * and a path planted there (a link out of `.git`) is followed with that user's rights only.
 *
 * A round reuses its pull request's worktree, always from the head as fetched: what an
 * earlier round left there undelivered is discarded, never carried into this round's
 * delivery (docs/delivery.md#the-review-loop).
 */
export async function checkoutPrHead(options: {
  workspace: string
  uuid: string
  workspacesDir: string | null
  head: PrHead
  forge: string
  credentials: CloneCredential[]
  /** Why an origin URL is not the pull request's repository (null: it is); such an origin is never fetched from. */
  notOurs?: (url: string) => string | null
}): Promise<{ workspace: string; checkedOut: boolean; note: string | null }> {
  const { workspace, head } = options
  if (!validRef(head.branch))
    throw new CtxError(`the pull request's head branch '${head.branch.slice(0, 60)}' is not a branch name ctxagent checks out`, {
      hint: 'run it with a --task instead',
    })
  const top = await safeGit(workspace, ['rev-parse', '--show-toplevel']).then(
    (out) => out.trim(),
    () => null,
  )
  if (top === null)
    return { workspace, checkedOut: false, note: `${workspace} is not a git repository: the task works there without the pull request's branch` }
  const url = (await safeGit(top, ['config', '--get', 'remote.origin.url']).catch(() => '')).trim()
  if (url === '') return { workspace, checkedOut: false, note: `${top} has no origin remote: the task works there without the pull request's branch` }
  // The origin is the repository's config, which an earlier round's agent could have rewritten: the token goes to the pull request's repository only.
  const elsewhere = options.notOurs?.(url) ?? null
  if (elsewhere !== null)
    throw new CtxError(elsewhere.replace(/: nothing pushed$/, ': its head branch is not fetched from there'), {
      hint: `set the origin back (git -C ${top} remote set-url origin URL)`,
    })
  const fetchHead = async (dir: string, owner: Owner | null): Promise<string> => {
    const credential = credentialFor(url, options.credentials)
    const helper = credential === null ? [] : ['-c', 'credential.helper=', '-c', `credential.helper=${HELPER}`]
    const common = resolve(dir, (await safeGit(dir, ['rev-parse', '--git-common-dir'])).trim())
    // The network fetch runs in a scratch repository of ctxagent's own: none of the workspace's
    // configuration (http.proxy, http.sslVerify, url.*.insteadOf, an agent could set them) is read
    // while the token is in git's hands. Its objects come from the workspace's through alternates.
    const scratch = mkdtempSync(join(tmpdir(), 'ctxagent-pr-fetch-'))
    try {
      await run(['init', '--quiet', '--bare', '--template=', scratch], gitEnv(null))
      writeFileSync(join(scratch, 'objects', 'info', 'alternates'), `${join(common, 'objects')}\n`)
      // By URL, with git's own upload-pack: remote.origin.uploadpack (an agent could set it) runs nothing.
      await run(
        [
          ...BASE,
          ...helper,
          '--git-dir',
          scratch,
          'fetch',
          '--quiet',
          '--no-tags',
          '--upload-pack=git-upload-pack',
          '--',
          fetchUrl(url, top),
          `+refs/heads/${head.branch}:refs/heads/head`,
        ],
        gitEnv(credential),
      )
      // Then into the workspace by path, as its git directory's owner (who must read the scratch repository), a
      // url.*.insteadOf of the workspace's outmatched by this one (the longest wins).
      if (owner !== null) chownTree(scratch, owner)
      await safeGit(
        dir,
        ['-c', `url.${scratch}.insteadOf=${scratch}`, 'fetch', '--quiet', '--no-tags', '--upload-pack=git-upload-pack', '--', scratch, 'refs/heads/head'],
        gitEnv(null),
        owner,
      )
    } finally {
      rmSync(scratch, { recursive: true, force: true })
    }
    return (await safeGit(dir, ['rev-parse', '--verify', 'FETCH_HEAD^{commit}'])).trim()
  }
  const own = options.workspacesDir !== null && samePath(top, join(options.workspacesDir, options.uuid))
  const common = resolve(top, (await safeGit(top, ['rev-parse', '--git-common-dir'])).trim())
  const owner = ownerOf(common)
  const write = (at: string, args: string[]) => safeGit(at, args, gitEnv(null), owner)
  if (own) {
    const sha = await fetchHead(top, owner)
    await write(top, ['checkout', '--quiet', '-B', head.branch, sha, '--'])
    return { workspace: top, checkedOut: true, note: null }
  }
  const dir = join(common, 'ctxagent', 'worktrees', `${options.forge}-${head.number}`)
  if (existsSync(join(dir, '.git'))) {
    const sha = await fetchHead(dir, owner)
    // A follow-up: the worktree of the last round, at the head as fetched. What an earlier round left there undelivered
    // (a failed or refused delivery, a task that never finished) is discarded: only this round's change is delivered.
    const dirty = (await safeGit(dir, ['status', '--porcelain', '--untracked-files=all', '--ignored'])).trim() !== ''
    await write(dir, ['checkout', '--quiet', '--force', '--detach', sha, '--'])
    if (dirty) await write(dir, ['clean', '--quiet', '-ffdx'])
    await write(dir, ['checkout', '--quiet', '-B', head.branch, '--']).catch(() => undefined)
    const note = dirty
      ? `the worktree ${dir} held changes an earlier round did not deliver: discarded, this round starts from the head ${sha.slice(0, 12)}`
      : null
    return { workspace: dir, checkedOut: true, note }
  }
  const sha = await fetchHead(top, owner)
  // The local branch is made or moved only when that loses nothing (absent, or behind the head); else the worktree is detached there.
  const local = (await safeGit(top, ['rev-parse', '--verify', '--quiet', `refs/heads/${head.branch}`]).catch(() => '')).trim()
  const movable =
    local === '' ||
    (await safeGit(top, ['merge-base', '--is-ancestor', local, sha]).then(
      () => true,
      () => false,
    ))
  const added = movable
    ? await write(top, ['worktree', 'add', '--quiet', '-B', head.branch, dir, sha]).then(
        () => true,
        () => false,
      )
    : false
  // The branch is checked out elsewhere (the operator's own worktree): detached at the same commit.
  if (!added) await write(top, ['worktree', 'add', '--quiet', '--detach', dir, sha])
  return { workspace: realpathSync(dir), checkedOut: true, note: null }
}

/** A local origin given as a relative path is relative to the repository. */
function fetchUrl(url: string, top: string): string {
  return /^[a-z][a-z0-9+.-]*:\/\//i.test(url) || /^[\w.-]+@[\w.-]+:/.test(url) || isAbsolute(url) ? url : resolve(top, url)
}

type Owner = { uid: number; gid: number }

/** As root, the owner of a git directory that is not root's: git writes there as that user. Null: as ctxagent runs. */
function ownerOf(gitDir: string): Owner | null {
  if (process.getuid?.() !== 0) return null
  const { uid, gid } = statSync(gitDir)
  return uid === 0 ? null : { uid, gid }
}

function samePath(a: string, b: string): boolean {
  try {
    return realpathSync(a) === realpathSync(b)
  } catch {
    return false
  }
}

/**
 * git in a workspace an agent wrote to: nothing of what it could have put in the
 * repository's config runs — hooks (core.hooksPath), core.fsmonitor, filter drivers (each
 * configured one is emptied for the command), diff.external, core.sshCommand, credential
 * helpers, the ext:: transport. As root, the workspace belongs to the sandbox's user:
 * git's ownership check is answered for this command only (-c safe.directory).
 */
export async function safeGit(dir: string, args: string[], env: NodeJS.ProcessEnv = gitEnv(null), as: Owner | null = null): Promise<string> {
  const filters = await run(['-C', dir, ...BASE, 'config', '--get-regexp', '^filter\\..*\\.(clean|smudge|process)$'], env).catch(() => '')
  const disabled = [
    ...new Set(
      filters
        .split('\n')
        .map((line) => /^filter\.(.+)\.(?:clean|smudge|process) /.exec(line)?.[1])
        .filter((n): n is string => n !== undefined),
    ),
  ].flatMap((name) => ['-c', `filter.${name}.clean=`, '-c', `filter.${name}.smudge=`, '-c', `filter.${name}.process=`, '-c', `filter.${name}.required=false`])
  // Whoever set core.sshCommand in the repository: the operator's GIT_SSH_COMMAND still wins, as git has it.
  const helperGiven = args.some((a) => a.startsWith('credential.helper=!'))
  return run(['-C', dir, ...BASE, ...(helperGiven ? [] : ['-c', 'credential.helper=']), ...disabled, ...args], env, as)
}

const asRoot = (): string[] => (process.getuid?.() === 0 ? ['-c', 'safe.directory=*'] : [])

const BASE = [
  '-c',
  'core.hooksPath=/dev/null',
  '-c',
  'core.fsmonitor=false',
  '-c',
  'diff.external=',
  '-c',
  'core.sshCommand=ssh',
  '-c',
  'protocol.ext.allow=never',
  '-c',
  'core.askPass=',
  // A fetch runs these for an alternate's refs and for git:// URLs.
  '-c',
  'core.alternateRefsCommand=',
  '-c',
  'core.gitProxy=',
  ...asRoot(),
]

function run(args: string[], env: NodeJS.ProcessEnv, as: Owner | null = null): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile('git', args, { env, timeout: 600_000, maxBuffer: 16 * 1024 * 1024, ...(as ?? {}) }, (err, stdout, stderr) => {
      if (err === null) resolve(String(stdout))
      else reject(new CtxError(`git ${subcommand(args)} failed: ${String(stderr).trim().split('\n').pop() || err.message}`.slice(0, 300)))
    })
  })
}

/** The git subcommand of an argument list: the first word after `-C dir` and the `-c key=value` pairs. */
function subcommand(args: string[]): string {
  for (let i = 0; i < args.length; i++) {
    if (args[i] === '-C' || args[i] === '-c') i++
    else return args[i] as string
  }
  return ''
}
