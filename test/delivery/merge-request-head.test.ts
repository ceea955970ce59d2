import { existsSync, linkSync, lstatSync, mkdtempSync, readdirSync, readFileSync, realpathSync, rmSync, statSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, expect, it, onTestFinished } from 'vitest'
import { onlyTask } from '../run/harness.js'
import { branches, deliverySetup, filesHolding, FIXED, git, write } from './setup.js'

/**
 * docs/delivery.md#the-review-loop on GitLab: `run --gitlab group/project!N` works on the
 * merge request's source branch (a worktree of the operator's checkout, fetched over git's
 * smart HTTP with the token) and delivers one more commit there: no new branch, no new MR.
 */
describe('a task on a GitLab merge request', () => {
  it('works on its source branch in a worktree, records pr_head, and pushes one commit there with --deliver pr', async () => {
    const s = await deliverySetup('gitlab', '', { mr: true })
    const gl = s.gl as NonNullable<typeof s.gl>
    // The merge request's source branch fix-pagination: one commit over main, on the forge only.
    const seed = mkdtempSync(join(tmpdir(), 'ctxagent-mr-seed-'))
    onTestFinished(() => rmSync(seed, { recursive: true, force: true }))
    git(['clone', '--quiet', s.bare, seed], '/')
    git(['switch', '--quiet', '-c', 'fix-pagination'], seed)
    writeFileSync(join(seed, 'orders.rb'), 'def page(cursor) = cursor\n')
    git(['add', 'orders.rb'], seed)
    git(['commit', '--quiet', '-m', 'pagination by cursor'], seed)
    git(['push', '--quiet', 'origin', 'fix-pagination'], seed)
    const head = git(['rev-parse', 'HEAD'], seed)
    // The operator's checkout: main, with an uncommitted change of their own.
    writeFileSync(join(s.ws, 'NOTES'), 'mine\n')
    // A hard link in the git directory to a file of root's (an agent's, where fs.protected_hardlinks is off): never given away.
    const rootsFile = join(seed, 'roots-file')
    writeFileSync(rootsFile, 'root\n')
    const planted = join(s.ws, '.git', 'planted')
    const asRoot = process.getuid?.() === 0
    if (asRoot) linkSync(rootsFile, planted)
    // Read without writing (git status as root would rewrite the index as root's).
    const statusBefore = git(['--no-optional-locks', 'status', '--porcelain'], s.ws)

    s.fake.queue.push(write('calc.js', FIXED), { content: 'Fixed add, as the review asked.' })
    const res = await s.cli(['run', '--gitlab', 'acme/backend/api!12', '--workspace', s.ws, '--deliver', 'pr', '--json'])
    expect(res.code, res.stderr).toBe(0)
    // As root, nothing root made in the operator's repository stays root's (the operator's git, and delivery as its owner,
    // write there), but a file of root's linked into it stays root's. Checked before the test's own git (as root) runs there.
    if (asRoot) {
      expect(rootOwned(join(s.ws, '.git'))).toEqual([planted])
      expect(statSync(rootsFile).uid).toBe(0)
    }
    const task = onlyTask(s.tree)
    const url = 'https://gitlab.example/acme/backend/api/-/merge_requests/12'
    const worktree = realpathSync(join(s.ws, '.git', 'ctxagent', 'worktrees', 'gitlab-12'))
    expect(task.metadata).toMatchObject({
      task_type: 'gitlab_merge_request',
      run: { workspace: worktree, pr_head: { branch: 'fix-pagination', number: 12, url } },
    })
    // One commit more on the source branch, over its head; pushed with the token; the MR named, none opened.
    const commit = git(['--git-dir', s.bare, 'rev-parse', 'refs/heads/fix-pagination'], '/')
    expect(task.state.delivery).toEqual({ mode: 'pr', branch: 'fix-pagination', commit, pushed: true, pr: { number: 12, url }, refused: null })
    expect(git(['--git-dir', s.bare, 'rev-parse', `${commit}^`], '/')).toBe(head)
    expect(git(['--git-dir', s.bare, 'show', `${commit}:calc.js`], '/')).toBe(FIXED.trim())
    expect(git(['--git-dir', s.bare, 'show', `${commit}:orders.rb`], '/')).toBe('def page(cursor) = cursor')
    expect(git(['--git-dir', s.bare, 'rev-parse', 'refs/heads/main'], '/')).toBe(s.first)
    expect(branches(s.bare).sort()).toEqual(['fix-pagination', 'main'])
    expect(gl.mergeRequests).toEqual([])
    expect(gl.requests.filter((r) => r.method === 'POST' && r.path.includes('/merge_requests') && !r.path.includes('/notes'))).toEqual([])
    expect(s.auth).toContain(`Basic ${Buffer.from(`oauth2:${gl.token}`).toString('base64')}`)
    // The worktree follows its branch; the operator's checkout is as it was.
    expect(git(['rev-parse', '--abbrev-ref', 'HEAD'], worktree)).toBe('fix-pagination')
    expect(git(['rev-parse', 'HEAD'], worktree)).toBe(commit)
    expect(git(['rev-parse', '--abbrev-ref', 'HEAD'], s.ws)).toBe('main')
    expect(git(['rev-parse', 'HEAD'], s.ws)).toBe(s.first)
    expect(git(['status', '--porcelain'], s.ws)).toBe(statusBefore)
    expect(existsSync(join(s.ws, 'orders.rb'))).toBe(false)
    expect(readFileSync(join(s.ws, 'calc.js'), 'utf8')).not.toBe(FIXED)
    // The token is nowhere on disk it must not be.
    expect(filesHolding(join(s.ws, '.git'), gl.token)).toEqual([])
    expect(filesHolding(task.dir, gl.token)).toEqual([])
  })
})

/** Paths under `dir` that root owns. */
function rootOwned(dir: string): string[] {
  const st = lstatSync(dir)
  const here = st.uid === 0 ? [dir] : []
  return st.isDirectory() ? [...here, ...readdirSync(dir).flatMap((name) => rootOwned(join(dir, name)))] : here
}
