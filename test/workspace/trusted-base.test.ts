import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, expect, it, onTestFinished } from 'vitest'
import { outsideAnyRepository, readTrusted, trustedBase } from '../../src/workspace/trusted-base.js'
import type { TrustedBase } from '../../src/workspace/trusted-base.js'
import { git, makeOrigin, write } from './repo.js'

/*
 * The trusted base (docs/environments.md#where-it-is-read-from) found in two rounds of git, with the
 * paths asked for ahead listed at it (docs/fleet.md#dispatch-latency): real repositories, and every
 * read of a listed path the same as the read of it unlisted (git's own ls-tree of that one path).
 */

const AHEAD = ['.ctxagent/environment.yml', 'AGENTS.md', 'CLAUDE.md', 'link.md']

function scratch(): string {
  const dir = mkdtempSync(join(tmpdir(), 'ctxagent-base-'))
  onTestFinished(() => rmSync(dir, { recursive: true, force: true }))
  return dir
}

/** `base` without what was listed ahead: each path then read with a git call of its own. */
function unlisted(base: TrustedBase): TrustedBase {
  if (base.kind !== 'commit') return base
  return { kind: 'commit', commit: base.commit, ref: base.ref }
}

describe('trustedBase', () => {
  it("a clone: origin's default branch, its files listed ahead and read as each alone reads them; the checkout's changes are not", async () => {
    const origin = makeOrigin({ 'AGENTS.md': 'BASE RULE\n', '.ctxagent/environment.yml': 'test: npm test\n', 'big.md': 'x'.repeat(100) })
    const ws = origin.clone()
    git(ws, 'checkout', '--quiet', '-b', 'pr-head')
    write(ws, { 'AGENTS.md': 'HOSTILE RULE\n', 'CLAUDE.md': 'HOSTILE TOO\n' })
    git(ws, 'add', '-A')
    git(ws, 'commit', '--quiet', '-m', 'a pull request')
    const base = await trustedBase(ws, AHEAD)
    const head = git(ws, 'rev-parse', 'origin/HEAD').trim()
    expect(base).toMatchObject({ kind: 'commit', commit: head, ref: 'origin/HEAD' })
    expect(base.kind === 'commit' ? Object.keys(base.listed ?? {}) : []).toEqual(AHEAD)
    expect(await readTrusted(ws, base, 'AGENTS.md', 1024)).toEqual({
      kind: 'file',
      text: 'BASE RULE\n',
      id: git(ws, 'rev-parse', 'origin/HEAD:AGENTS.md').trim(),
    })
    expect(await readTrusted(ws, base, '.ctxagent/environment.yml', 1024)).toMatchObject({ kind: 'file', text: 'test: npm test\n' })
    expect(await readTrusted(ws, base, 'CLAUDE.md', 1024)).toEqual({ kind: 'absent' })
    for (const path of [...AHEAD, 'big.md'])
      for (const max of [10, 1024]) expect(await readTrusted(ws, base, path, max)).toEqual(await readTrusted(ws, unlisted(base), path, max))
    // A path not asked for ahead is read on its own, as before.
    expect(await readTrusted(ws, base, 'big.md', 1024)).toMatchObject({ kind: 'file', text: 'x'.repeat(100) })
  })

  it('a link at the base is refused, listed or not', async () => {
    const dir = scratch()
    git(dir, 'init', '--quiet')
    write(dir, { 'target.md': 'secret\n' })
    symlinkSync('target.md', join(dir, 'link.md'))
    git(dir, 'add', '-A')
    git(dir, 'commit', '--quiet', '-m', 'a link')
    const base = await trustedBase(dir, AHEAD)
    expect(base).toMatchObject({ kind: 'commit', ref: 'HEAD', commit: git(dir, 'rev-parse', 'HEAD').trim() })
    expect(await readTrusted(dir, base, 'link.md', 1024)).toEqual({ kind: 'refused', why: 'link.md is not a regular file at HEAD' })
    expect(await readTrusted(dir, unlisted(base), 'link.md', 1024)).toEqual({ kind: 'refused', why: 'link.md is not a regular file at HEAD' })
  })

  it('origin/main when origin/HEAD is not known; none when the origin has neither; none before the first commit; the workspace outside git', async () => {
    const origin = makeOrigin({ 'AGENTS.md': 'RULE\n' })
    const ws = origin.clone()
    git(ws, 'remote', 'set-head', 'origin', '--delete')
    expect(await trustedBase(ws)).toMatchObject({ kind: 'commit', ref: 'origin/main', commit: git(ws, 'rev-parse', 'origin/main').trim() })
    git(ws, 'update-ref', '-d', 'refs/remotes/origin/main')
    expect(await trustedBase(ws, AHEAD)).toEqual({
      kind: 'none',
      why: "its origin's default branch is not known here (no origin/HEAD, origin/main or origin/master)",
    })
    const empty = scratch()
    git(empty, 'init', '--quiet')
    expect(await trustedBase(empty, AHEAD)).toEqual({ kind: 'none', why: 'it has no commit yet' })
    expect(await trustedBase(scratch(), AHEAD)).toEqual({ kind: 'workspace' })
  })

  it("what a repository's config or a broken ref holds is never read as a candidate; git that cannot be asked trusts nothing", async () => {
    const dir = scratch()
    git(dir, 'init', '--quiet')
    write(dir, { 'AGENTS.md': 'rule\n' })
    git(dir, 'add', '-A')
    git(dir, 'commit', '--quiet', '-m', 'first')
    const head = git(dir, 'rev-parse', 'HEAD').trim()
    // An origin's URL whose first line is empty, and whose next line looks like cat-file's answer for a commit.
    git(dir, 'config', 'remote.origin.url', `\n${head} commit 180`)
    const none = { kind: 'none', why: "its origin's default branch is not known here (no origin/HEAD, origin/main or origin/master)" }
    expect(await trustedBase(dir, AHEAD)).toEqual(none)
    // origin/HEAD naming a corrupt object: cat-file dies before it answers the other candidates.
    const bad = 'ab'.repeat(20)
    mkdirSync(join(dir, '.git', 'objects', 'ab'), { recursive: true })
    writeFileSync(join(dir, '.git', 'objects', 'ab', bad.slice(2)), 'not an object')
    mkdirSync(join(dir, '.git', 'refs', 'remotes', 'origin'), { recursive: true })
    writeFileSync(join(dir, '.git', 'refs', 'remotes', 'origin', 'HEAD'), `${bad}\n`)
    expect(await trustedBase(dir, AHEAD)).toEqual(none)
    // No sh (and so no git) on the PATH: a repository is in sight, and nothing of it is trusted.
    const path = process.env.PATH
    process.env.PATH = scratch()
    try {
      expect(await trustedBase(dir, AHEAD)).toEqual({ kind: 'none', why: 'git could not be asked about its repository' })
    } finally {
      process.env.PATH = path
    }
  })

  it('a workspace is taken as outside git without asking git only where git finds no repository either', async () => {
    const top = scratch()
    const plain = join(top, 'plain')
    mkdirSync(plain)
    // A repository's subdirectory, its git directory, a bare repository and a directory beneath it, a `.git` file naming a
    // git directory elsewhere, a link into a repository: each has a `.git` or `HEAD` at or above it, and git decides.
    const repo = join(top, 'repo')
    mkdirSync(join(repo, 'sub', 'deeper'), { recursive: true })
    git(repo, 'init', '--quiet')
    const bare = join(top, 'bare.git')
    git(top, 'init', '--quiet', '--bare', bare)
    const linked = join(top, 'linked')
    mkdirSync(linked)
    writeFileSync(join(linked, '.git'), `gitdir: ${join(repo, '.git')}\n`)
    symlinkSync(join(repo, 'sub'), join(top, 'link'))
    const cases = [plain, join(repo, 'sub', 'deeper'), join(repo, '.git'), bare, join(bare, 'refs'), linked, join(top, 'link'), join(top, 'missing')]
    const outside = cases.filter((dir) => outsideAnyRepository(dir))
    expect(outside).toEqual([plain])
    const gitFinds = (dir: string): boolean => {
      try {
        git(dir, 'rev-parse', '--git-dir')
        return true
      } catch {
        return false
      }
    }
    for (const dir of cases.slice(1, -1)) expect(gitFinds(dir)).toBe(true)
    expect(gitFinds(plain)).toBe(false)
    expect(await trustedBase(plain, AHEAD)).toEqual({ kind: 'workspace' })
    expect(await trustedBase(join(top, 'link'), AHEAD)).toEqual({ kind: 'none', why: 'it has no commit yet' })
  })
})
