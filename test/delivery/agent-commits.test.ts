import { execFileSync } from 'node:child_process'
import { mkdirSync, mkdtempSync, realpathSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, expect, it, onTestFinished } from 'vitest'
import { giveToSandbox, SANDBOX_UID } from '../helpers/sandbox-owner.js'
import { onlyTask } from '../run/harness.js'
import { deliverySetup, filesHolding, FIXED, git, runWithAgent } from './setup.js'
import type { DeliverySetup } from './setup.js'

/**
 * docs/contract.md §13.4, docs/delivery.md#the-commit: what reaches the forge is ctxagent's
 * own commit of the work tree, one parent, ctxagent's author and message. A commit the agent
 * made on the very branch delivery pushes — of the same tree, over the same first parent,
 * with a second parent carrying a git-ignored `.env` with the forge token, a foreign author
 * and the token in its message — is part of the work tree's history, never pushed.
 */
const IDENTITIES: [string, number][] =
  process.getuid?.() === 0
    ? [
        ['root', 0],
        ['an unprivileged user', SANDBOX_UID],
      ]
    : [['itself', 0]]

/** As an agent could, in its tree `dir`: the fix in the files, and on `branch` (checked out) a merge commit of exactly that tree carrying the token. */
function agentCommits(s: DeliverySetup, dir: string, branch: string, token: string): { merge: string; side: string } {
  const env = {
    PATH: process.env.PATH,
    HOME: '/nonexistent',
    GIT_CONFIG_NOSYSTEM: '1',
    GIT_CONFIG_GLOBAL: '/dev/null',
    GIT_AUTHOR_NAME: 'Mallory',
    GIT_AUTHOR_EMAIL: 'm@evil.example',
    GIT_COMMITTER_NAME: 'Mallory',
    GIT_COMMITTER_EMAIL: 'm@evil.example',
  }
  const as = (args: string[]) => execFileSync('git', ['-c', 'safe.directory=*', ...args], { cwd: dir, env, encoding: 'utf8' }).trim()
  const base = as(['rev-parse', 'HEAD'])
  writeFileSync(join(dir, 'calc.js'), FIXED)
  mkdirSync(join(dir, 'build'), { recursive: true })
  // build/ is git-ignored: the file stays out of the work tree's content, and in the side commit's.
  writeFileSync(join(dir, 'build', '.env'), `GITHUB_TOKEN=${token}\n`)
  as(['add', 'calc.js'])
  const tree = as(['write-tree'])
  as(['add', '-f', 'build/.env'])
  const sideTree = as(['write-tree'])
  as(['reset', '--quiet'])
  const side = as(['commit-tree', sideTree, '-p', base, '-m', 'env'])
  const merge = as(['commit-tree', tree, '-p', base, '-p', side, '-m', `Fix add\n\ntoken=${token}`])
  as(['update-ref', `refs/heads/${branch}`, merge])
  as(['symbolic-ref', 'HEAD', `refs/heads/${branch}`])
  as(['read-tree', merge])
  giveToSandbox(s.ws)
  return { merge, side }
}

/** The remote has neither of the agent's commits, nor the token anywhere; `ref` is ctxagent's one-parent commit over `parent`. */
function ctxagentsOnly(s: DeliverySetup, ref: string, parent: string, agent: { merge: string; side: string }, token: string): string {
  const pushed = git(['--git-dir', s.bare, 'rev-parse', ref], '/')
  expect(pushed).not.toBe(agent.merge)
  expect(git(['--git-dir', s.bare, 'show', '-s', '--format=%P|%an <%ae>|%cn', pushed], '/')).toBe(
    `${parent}|ctxagent-bot <ctxagent-bot@users.noreply.ctxagent.invalid>|ctxagent-bot`,
  )
  expect(git(['--git-dir', s.bare, 'show', `${pushed}:calc.js`], '/')).toBe(FIXED.trim())
  for (const id of [agent.merge, agent.side]) expect(() => git(['--git-dir', s.bare, 'cat-file', '-e', id], '/')).toThrow()
  expect(filesHolding(s.bare, token)).toEqual([])
  return pushed
}

describe.each(IDENTITIES)("the agent's own commits, never pushed (as %s)", (_, uid) => {
  it('on the delivery branch: the remote receives ctxagent’s commit of the tree, one parent, its author, its message', async () => {
    const s = await deliverySetup('github')
    s.runAs(uid)
    const token = (s.gh as NonNullable<typeof s.gh>).token
    s.fake.queue.push({ content: 'add() adds now.' })
    let agent = { merge: '', side: '' }
    let branch = ''
    const res = await runWithAgent(s, ['run', '--github', 'acme/shop#42', '--workspace', s.ws, '--deliver', 'pr', '--json'], (tree) => {
      branch = `ctxagent/42-${onlyTask(s.tree).uuid.slice(0, 8)}`
      agent = agentCommits(s, tree, branch, token)
    })
    expect(res.code, res.stderr).toBe(0)
    const task = onlyTask(s.tree)
    const delivery = task.state.delivery as { commit: string; pushed: boolean; refused: string | null }
    expect(delivery).toMatchObject({ pushed: true, refused: null })
    const pushed = ctxagentsOnly(s, `refs/heads/${branch}`, s.first, agent, token)
    expect(delivery.commit).toBe(pushed)
    expect(git(['--git-dir', s.bare, 'log', '--format=%B', '-1', pushed], '/')).toBe(`add() adds now.\n\nctxagent task ${task.uuid}`)
    // The repository's branch is ctxagent's commit now; the agent's is an unreferenced object there.
    expect(git(['rev-parse', `refs/heads/${branch}`], s.ws)).toBe(pushed)
  })

  it('on a pull request’s head branch: one more commit of ctxagent’s over the head as fetched from the forge', async () => {
    const s = await deliverySetup('gitlab', '', { mr: true })
    s.runAs(uid)
    const token = (s.gl as NonNullable<typeof s.gl>).token
    const seed = mkdtempSync(join(tmpdir(), 'ctxagent-mr-seed-'))
    onTestFinished(() => rmSync(seed, { recursive: true, force: true }))
    git(['clone', '--quiet', s.bare, seed], '/')
    git(['switch', '--quiet', '-c', 'fix-pagination'], seed)
    writeFileSync(join(seed, 'orders.rb'), 'def page(cursor) = cursor\n')
    git(['add', 'orders.rb'], seed)
    git(['commit', '--quiet', '-m', 'pagination by cursor'], seed)
    git(['push', '--quiet', 'origin', 'fix-pagination'], seed)
    const head = git(['rev-parse', 'HEAD'], seed)
    s.fake.queue.push({ content: 'Fixed add, as the review asked.' })
    let agent = { merge: '', side: '' }
    const res = await runWithAgent(s, ['run', '--gitlab', 'acme/backend/api!12', '--workspace', s.ws, '--deliver', 'pr', '--json'], (tree) => {
      // The pull request's head checked out for it is the task's tree.
      expect(tree).toBe(realpathSync(join(s.ws, '.git', 'ctxagent', 'worktrees', 'gitlab-12')))
      agent = agentCommits(s, tree, 'fix-pagination', token)
    })
    expect(res.code, res.stderr).toBe(0)
    const delivery = onlyTask(s.tree).state.delivery as { commit: string; pushed: boolean; refused: string | null }
    expect(delivery).toMatchObject({ pushed: true, refused: null })
    expect(delivery.commit).toBe(ctxagentsOnly(s, 'refs/heads/fix-pagination', head, agent, token))
  })
})
