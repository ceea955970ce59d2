import { mkdtempSync, renameSync, rmSync, symlinkSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, expect, it, onTestFinished } from 'vitest'
import { giveToSandbox, SANDBOX_UID } from '../helpers/sandbox-owner.js'
import { onlyTask } from '../run/harness.js'
import { branches, deliverySetup, FIXED, git, runWithAgent } from './setup.js'
import type { DeliverySetup } from './setup.js'

/**
 * docs/delivery.md#the-repository: delivery works on the repository of the task's tree
 * (its own worktree, whose `.git` is a gitfile), recorded before the agent runs. An agent
 * that points the tree's `.git` at another repository (a gitfile naming it, a symbolic
 * link, its worktree's `commondir`), its work tree elsewhere (`core.worktree`), or lends it
 * another's objects (`alternates`) gets a refusal naming why, and the
 * other repository — a clone of the same origin, writable by whoever delivers — is left
 * exactly as it was.
 */
const IDENTITIES: [string, number][] =
  process.getuid?.() === 0
    ? [
        ['root', 0],
        ['an unprivileged user', SANDBOX_UID],
      ]
    : [['itself', 0]]

/** Another clone of the origin, the sandbox user's, and how it stands (every ref, every object). */
function otherRepository(s: DeliverySetup): { dir: string; state: () => string } {
  const parent = mkdtempSync(join(tmpdir(), 'ctxagent-other-'))
  onTestFinished(() => rmSync(parent, { recursive: true, force: true }))
  const dir = join(parent, 'other')
  git(['clone', '--quiet', s.bare, dir], '/')
  writeFileSync(join(dir, 'calc.js'), 'the other checkout’s own file\n')
  giveToSandbox(dir, parent)
  const state = () =>
    [git(['for-each-ref', '--format=%(refname) %(objectname)'], dir), git(['count-objects', '-v'], dir), git(['status', '--porcelain'], dir)].join('\n')
  return { dir, state }
}

const SWAPS: [string, (ws: string, other: string) => void, RegExp][] = [
  [
    'a gitfile naming the other repository',
    (ws, other) => {
      renameSync(join(ws, '.git'), join(ws, '.git-was'))
      writeFileSync(join(ws, '.git'), `gitdir: ${join(other, '.git')}\n`)
    },
    /the workspace's \.git names another git directory \(.*\/other\/\.git\) than the task started with: not delivered/,
  ],
  [
    'a symbolic link to the other repository',
    (ws, other) => {
      renameSync(join(ws, '.git'), join(ws, '.git-was'))
      symlinkSync(join(other, '.git'), join(ws, '.git'))
    },
    /the workspace's \.git is a symbolic link now, not what the task started with: not delivered/,
  ],
  [
    'core.worktree pointing at the other checkout',
    (ws, other) => git(['config', 'core.worktree', other], ws),
    /the repository's config sets core\.worktree \(.*other\): not delivered/,
  ],
  [
    "the tree's commondir naming the other repository",
    (ws, other) => writeFileSync(join(git(['rev-parse', '--absolute-git-dir'], ws), 'commondir'), `${join(other, '.git')}\n`),
    /the repository's commondir names another repository than the task started with: not delivered/,
  ],
  [
    "alternates lending the other repository's objects",
    (ws, other) =>
      writeFileSync(
        join(git(['rev-parse', '--path-format=absolute', '--git-common-dir'], ws), 'objects', 'info', 'alternates'),
        `${join(other, '.git', 'objects')}\n`,
      ),
    /the repository's objects\/info\/alternates changed since the task started: not delivered/,
  ],
]

describe.each(IDENTITIES)("a task's tree whose .git changed under the agent (as %s)", (_, uid) => {
  it.each(SWAPS)('%s: refused, naming why; nothing pushed; the other repository unchanged', async (_what, swap, why) => {
    const s = await deliverySetup('github')
    s.runAs(uid)
    const other = otherRepository(s)
    const before = other.state()
    s.fake.queue.push({ content: 'Fixed add.' })
    const res = await runWithAgent(s, ['run', '--github', 'acme/shop#42', '--workspace', s.ws, '--deliver', 'pr', '--json'], (tree) => {
      writeFileSync(join(tree, 'calc.js'), FIXED)
      swap(tree, other.dir)
      // What the test's git wrote as root (the tree sits in the checkout's .git) goes back to the checkout's owner.
      giveToSandbox(s.ws)
    })
    // Refused: completed, not delivered (exit 6, docs/contract.md §9).
    expect(res.code, res.stderr).toBe(6)
    const delivery = onlyTask(s.tree).state.delivery as { refused: string | null; pushed: boolean; commit: string | null }
    expect(delivery).toMatchObject({ pushed: false, commit: null })
    expect(delivery.refused).toMatch(why)
    expect(other.state()).toBe(before)
    expect(branches(s.bare)).toEqual(['main'])
    expect((s.gh as NonNullable<typeof s.gh>).pulls).toEqual([])
  })
})
