import { lchownSync, lstatSync, mkdtempSync, readdirSync, realpathSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, expect, it, onTestFinished } from 'vitest'
import { onlyTask } from '../run/harness.js'
import { deliverySetup, FIXED, git, write } from './setup.js'

/**
 * docs/delivery.md#the-review-loop: a follow-up on a pull request from root's own checkout
 * (`poll --workspace <root's checkout>`, the README's example; `run --gitlab …!N` places it
 * the same way) works in a worktree given to the sandbox user, and delivers: every git
 * write into root's git directory runs as root, its owner, none as the sandbox user.
 */
describe.runIf(process.getuid?.() === 0)("a follow-up from root's own checkout", () => {
  it('is delivered: one commit more on the head branch, pushed; nothing in root’s .git left to another user but the worktree', async () => {
    const s = await deliverySetup('gitlab', '', { mr: true })
    const chownTree = (p: string): void => {
      lchownSync(p, 0, 0)
      if (lstatSync(p).isDirectory()) for (const name of readdirSync(p)) chownTree(join(p, name))
    }
    chownTree(s.ws)
    const seed = mkdtempSync(join(tmpdir(), 'ctxagent-mr-seed-'))
    onTestFinished(() => rmSync(seed, { recursive: true, force: true }))
    git(['clone', '--quiet', s.bare, seed], '/')
    git(['switch', '--quiet', '-c', 'fix-pagination'], seed)
    writeFileSync(join(seed, 'orders.rb'), 'def page(cursor) = cursor\n')
    git(['add', 'orders.rb'], seed)
    git(['commit', '--quiet', '-m', 'pagination by cursor'], seed)
    git(['push', '--quiet', 'origin', 'fix-pagination'], seed)
    const head = git(['rev-parse', 'HEAD'], seed)
    s.fake.queue.push(write('calc.js', FIXED), { content: 'Fixed add, as the review asked.' })
    const res = await s.cli(['run', '--gitlab', 'acme/backend/api!12', '--workspace', s.ws, '--deliver', 'pr', '--json'])
    expect(res.code, res.stderr).toBe(0)
    const task = onlyTask(s.tree)
    const worktree = realpathSync(join(s.ws, '.git', 'ctxagent', 'worktrees', 'gitlab-12'))
    expect(task.metadata.run).toMatchObject({ workspace: worktree })
    const commit = git(['--git-dir', s.bare, 'rev-parse', 'refs/heads/fix-pagination'], '/')
    expect(task.state.delivery).toMatchObject({ branch: 'fix-pagination', commit, pushed: true, refused: null })
    expect(git(['--git-dir', s.bare, 'rev-parse', `${commit}^`], '/')).toBe(head)
    expect(git(['--git-dir', s.bare, 'show', `${commit}:calc.js`], '/')).toBe(FIXED.trim())
    // The worktree follows its branch, and root's repository has the commit on it.
    expect(git(['rev-parse', 'refs/heads/fix-pagination'], s.ws)).toBe(commit)
    expect(git(['rev-parse', 'HEAD'], worktree)).toBe(commit)
    expect(notRoots(join(s.ws, '.git'), join(s.ws, '.git', 'ctxagent', 'worktrees'))).toEqual([])
  })
})

/** Paths under `dir` (but `skip`'s) that root does not own. */
function notRoots(dir: string, skip: string): string[] {
  if (dir.startsWith(skip)) return []
  const st = lstatSync(dir)
  const here = st.uid === 0 ? [] : [dir]
  return st.isDirectory() ? [...here, ...readdirSync(dir).flatMap((name) => notRoots(join(dir, name), skip))] : here
}
