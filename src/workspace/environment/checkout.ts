import { spawn, spawnSync } from 'node:child_process'
import { chmodSync, existsSync, lstatSync, mkdirSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { SAFE_CONFIG } from '../../delivery/git.js'
import { makeScratchDir } from '../../storage/fs/scratch-dir.js'

// The checkouts the environment works with: a scratch one of the trusted base for setup, and copies in and out of the cache.

/**
 * A checkout of `commit` of the repository at `workspace` in a new directory under the
 * system's temporary directory (reachable by the sandbox's user, whatever ctxagent's home
 * is), given to `owner`: `git archive` of the commit, so nothing of the task's branch, its
 * index or its `.git` comes along. The caller removes it.
 */
export async function scratchCheckout(workspace: string, commit: string, owner: { uid: number; gid: number } | null): Promise<string> {
  const dir = makeScratchDir('setup')
  chmodSync(dir, 0o711)
  const work = join(dir, 'checkout')
  mkdirSync(work)
  await archiveInto(workspace, commit, work).catch((err: Error) => {
    throw new Error(`the checkout of ${commit.slice(0, 12)} failed: ${err.message}`)
  })
  if (owner !== null) chownTree(work, owner)
  return work
}

/** `git archive <commit>` of the repository at `repo` unpacked into `into` (no repository configuration read); a failure's error is git's or tar's last line. */
export function archiveInto(repo: string, commit: string, into: string): Promise<void> {
  const gitArgs = [...SAFE_CONFIG.flatMap((c) => ['-c', c]), '-c', 'safe.directory=*', 'archive', '--format=tar', '--end-of-options', commit]
  return new Promise<void>((resolve, reject) => {
    const env = {
      PATH: process.env.PATH ?? '/usr/bin:/bin',
      HOME: '/nonexistent',
      GIT_CONFIG_NOSYSTEM: '1',
      GIT_CONFIG_GLOBAL: '/dev/null',
      GIT_NO_REPLACE_OBJECTS: '1',
    }
    const archive = spawn('git', gitArgs, { cwd: repo, env, stdio: ['ignore', 'pipe', 'pipe'] })
    const tar = spawn('tar', ['-x', '--no-same-owner', '-C', into], { stdio: ['pipe', 'ignore', 'pipe'] })
    archive.stdout.pipe(tar.stdin)
    let err = ''
    archive.stderr.on('data', (d: Buffer) => (err += d.toString()))
    tar.stderr.on('data', (d: Buffer) => (err += d.toString()))
    let codes = 0
    let failed = false
    const done = (code: number | null): void => {
      if (failed) return
      if (code !== 0) {
        failed = true
        return reject(new Error(err.trim().split('\n').pop() || `exit ${code}`))
      }
      if (++codes === 2) resolve()
    }
    archive.on('close', done)
    tar.on('close', done)
  })
}

/** As root, `path` and everything under it given to `owner` (links themselves, never followed). */
export function chownTree(path: string, owner: { uid: number; gid: number }): void {
  if (process.getuid?.() !== 0) return
  const r = spawnSync('chown', ['-R', '-h', `${owner.uid}:${owner.gid}`, '--', path], { encoding: 'utf8' })
  if (r.status !== 0) throw new Error(`chown of ${path} failed: ${r.stderr.trim()}`)
}

/**
 * A private copy of `from` at `to`: `cp -a --reflink=auto` (copy-on-write where the file
 * system has it, a full copy elsewhere; never a hard link, so a task writing into its copy
 * never writes into the cache's). Modes, owners and links are kept as they are.
 */
export function privateCopy(from: string, to: string): void {
  mkdirSync(dirname(to), { recursive: true })
  const r = spawnSync('cp', ['-a', '--reflink=auto', '--', from, to], { encoding: 'utf8' })
  if (r.status !== 0) throw new Error(`copying ${from} failed: ${(r.stderr ?? '').trim().split('\n').pop() ?? r.status}`)
}

/** Whether `path` exists at all (a dangling link counts). */
export function present(path: string): boolean {
  try {
    lstatSync(path)
    return true
  } catch {
    return existsSync(path)
  }
}

/**
 * Whether a step on the way to `path` under `root` (not the last) is other than a
 * directory: a link there would send a copy through it, to whatever ctxagent can read or
 * write and the sandbox cannot.
 */
export function linkOnTheWay(root: string, path: string): boolean {
  const steps = path.split('/').filter((s) => s !== '' && s !== '.')
  let at = root
  for (const step of steps.slice(0, -1)) {
    at = join(at, step)
    try {
      if (!lstatSync(at).isDirectory()) return true
    } catch {
      return false
    }
  }
  return false
}
