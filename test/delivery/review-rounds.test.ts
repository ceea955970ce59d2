import { mkdirSync, mkdtempSync, readdirSync, realpathSync, rmSync, symlinkSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, expect, it, onTestFinished } from 'vitest'
import { giveToSandbox } from '../helpers/sandbox-owner.js'
import { deliverySetup, git, write } from './setup.js'
import type { DeliverySetup } from './setup.js'

/** The uuids of a tree's tasks, wherever they are. */
const tasksOf = (s: DeliverySetup): string[] => (['running', 'paused', 'completed'] as const).flatMap((l) => s.tree.layout.list(l))

/**
 * docs/delivery.md#the-review-loop: each round on a merge request works in the worktree
 * `<git dir>/ctxagent/worktrees/gitlab-<N>`, from the head as fetched (what an earlier round
 * left there undelivered is discarded), and every git write into the operator's git
 * directory runs as that directory's owner.
 */
describe('the rounds of a review loop in an operator’s checkout', () => {
  it('start from the head as fetched: what a round left undelivered in the worktree never reaches the next round’s commit', { timeout: 300_000 }, async () => {
    const s = await deliverySetup('gitlab', '', { mr: true })
    const head = sourceBranch(s)
    s.fake.queue.push(write('calc.js', 'export const v = 1\n'), { content: 'Round one.' })
    const one = await s.cli(['run', '--gitlab', 'acme/backend/api!12', '--workspace', s.ws, '--deliver', 'pr', '--json'])
    expect(one.code, one.stderr).toBe(0)
    const first = git(['--git-dir', s.bare, 'rev-parse', 'refs/heads/fix-pagination'], '/')
    expect(git(['--git-dir', s.bare, 'rev-parse', `${first}^`], '/')).toBe(head)
    // What a round whose delivery never happened leaves behind: a tracked file edited, an untracked one, an ignored one.
    const worktree = realpathSync(join(s.ws, '.git', 'ctxagent', 'worktrees', 'gitlab-12'))
    writeFileSync(join(worktree, 'orders.rb'), 'half-done\n')
    writeFileSync(join(worktree, 'leftover.txt'), 'not this round’s\n')
    mkdirSync(join(worktree, 'build'), { recursive: true })
    writeFileSync(join(worktree, 'build', 'out.txt'), 'old build\n')
    // As the agent would have written them: the sandbox user's.
    giveToSandbox(worktree, null)

    s.fake.queue.push(write('notes.md', 'round two\n', false), { content: 'Round two.' })
    const two = await s.cli(['run', '--gitlab', 'acme/backend/api!12', '--workspace', s.ws, '--deliver', 'pr', '--json'])
    expect(two.code, two.stderr).toBe(0)
    expect(two.stderr).toMatch(/held changes an earlier round did not deliver: discarded/)
    const second = git(['--git-dir', s.bare, 'rev-parse', 'refs/heads/fix-pagination'], '/')
    expect(git(['--git-dir', s.bare, 'rev-parse', `${second}^`], '/')).toBe(first)
    // Only round two's change: notes.md, nothing of the leftovers.
    expect(git(['--git-dir', s.bare, 'diff', '--name-only', first, second], '/')).toBe('notes.md')
    expect(git(['--git-dir', s.bare, 'show', `${second}:orders.rb`], '/')).toBe('def page(cursor) = cursor')
    expect(readdirSync(worktree)).not.toContain('leftover.txt')
    expect(tasksOf(s)).toHaveLength(2)
  })

  it.runIf(process.getuid?.() === 0)(
    'writes into a user’s git directory as that user: a link the agent planted to a directory of root’s is not written through',
    { timeout: 240_000 },
    async () => {
      const s = await deliverySetup('gitlab', '', { mr: true })
      sourceBranch(s)
      // The checkout is the sandbox user's (the agent's to write, .git included): .git/ctxagent made a link to root's directory.
      const roots = mkdtempSync(join(tmpdir(), 'ctxagent-roots-'))
      onTestFinished(() => rmSync(roots, { recursive: true, force: true }))
      symlinkSync(roots, join(s.ws, '.git', 'ctxagent'))
      s.fake.queue.push(write('calc.js', 'export const v = 1\n'), { content: 'Done.' })
      const res = await s.cli(['run', '--gitlab', 'acme/backend/api!12', '--workspace', s.ws, '--deliver', 'pr', '--json'])
      expect(res.code, res.stderr).not.toBe(0)
      expect(res.stderr).toMatch(/git worktree failed: .*Permission denied/)
      expect(readdirSync(roots)).toEqual([])
      expect(tasksOf(s)).toEqual([])
      expect(s.fake.requests.length).toBe(0)
    },
  )
})

/** The merge request's source branch fix-pagination on the forge: one commit over main; returns its head. */
function sourceBranch(s: DeliverySetup): string {
  const seed = mkdtempSync(join(tmpdir(), 'ctxagent-mr-seed-'))
  onTestFinished(() => rmSync(seed, { recursive: true, force: true }))
  git(['clone', '--quiet', s.bare, seed], '/')
  git(['switch', '--quiet', '-c', 'fix-pagination'], seed)
  writeFileSync(join(seed, 'orders.rb'), 'def page(cursor) = cursor\n')
  git(['add', 'orders.rb'], seed)
  git(['commit', '--quiet', '-m', 'pagination by cursor'], seed)
  git(['push', '--quiet', 'origin', 'fix-pagination'], seed)
  return git(['rev-parse', 'HEAD'], seed)
}
