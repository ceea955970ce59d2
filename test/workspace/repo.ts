import { execFileSync } from 'node:child_process'
import { mkdtempSync, mkdirSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { onTestFinished } from 'vitest'
import { giveToSandbox } from '../helpers/sandbox-owner.js'

// Real git repositories for the environment's tests: an origin (a bare repository) and clones of it, as a fleet's --repo makes.

export const git = (cwd: string, ...args: string[]): string =>
  execFileSync('git', ['-c', 'user.name=t', '-c', 'user.email=t@example.com', '-c', 'init.defaultBranch=main', '-c', 'safe.directory=*', ...args], {
    cwd,
    encoding: 'utf8',
  })

export interface Origin {
  bare: string
  /** Commits `files` on main and pushes them. */
  commit(files: Record<string, string>, message?: string): void
  /** A clone of it in a directory of its own, given to the sandbox's user. */
  clone(): string
}

export function makeOrigin(files: Record<string, string>): Origin {
  const top = mkdtempSync(join(tmpdir(), 'ctxagent-origin-'))
  onTestFinished(() => rmSync(top, { recursive: true, force: true }))
  const bare = join(top, 'repo.git')
  const work = join(top, 'work')
  git(top, 'init', '--quiet', '--bare', bare)
  git(top, 'clone', '--quiet', bare, work)
  const commit = (more: Record<string, string>, message = 'change'): void => {
    write(work, more)
    git(work, 'add', '-A')
    git(work, 'commit', '--quiet', '-m', message)
    git(work, 'push', '--quiet', 'origin', 'HEAD:main')
  }
  commit(files, 'start')
  git(top, '--git-dir', bare, 'symbolic-ref', 'HEAD', 'refs/heads/main')
  return {
    bare,
    commit,
    clone: () => {
      const parent = mkdtempSync(join(tmpdir(), 'ctxagent-clone-'))
      onTestFinished(() => rmSync(parent, { recursive: true, force: true }))
      const ws = join(parent, 'ws')
      git(parent, 'clone', '--quiet', bare, ws)
      giveToSandbox(ws)
      return ws
    },
  }
}

export function write(dir: string, files: Record<string, string>): void {
  for (const [path, text] of Object.entries(files)) {
    mkdirSync(dirname(join(dir, path)), { recursive: true })
    writeFileSync(join(dir, path), text)
  }
}
