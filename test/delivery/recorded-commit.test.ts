import { execFileSync } from 'node:child_process'
import { existsSync, mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, expect, it, onTestFinished } from 'vitest'
import { giveToSandbox } from '../helpers/sandbox-owner.js'
import { exitOf } from '../helpers/wait.js'
import { onlyTask, waitFor } from '../run/harness.js'
import { deliverySetup, FIXED, git, write } from './setup.js'

/**
 * docs/delivery.md#a-crash-during-delivery: the commit delivery made is in the task's
 * state before it leaves delivery's staging directory, and a delivery after a crash
 * reuses exactly that commit. A commit of the same shape (same tree, same parent) put on
 * the branch meanwhile — another author, a token in its message — is never taken for it.
 */
describe('a delivery after a crash', () => {
  it('reuses exactly the commit the task recorded, never one of the same shape found on the branch', async () => {
    const s = await deliverySetup('github')
    const gh = s.gh as NonNullable<typeof s.gh>
    s.fake.queue.push(write('calc.js', FIXED), { content: 'Fixed add.' })
    const markerDir = mkdtempSync(join(tmpdir(), 'ctxagent-marker-'))
    onTestFinished(() => rmSync(markerDir, { recursive: true, force: true }))
    const marker = join(markerDir, 'at')
    const child = s.spawn(['run', '--github', 'acme/shop#42', '--workspace', s.ws, '--deliver', 'pr'], {
      CTXAGENT_TEST_PAUSE_AT: 'deliver-committed',
      CTXAGENT_TEST_PAUSE_MARKER: marker,
    })
    await waitFor('the agent at deliver-committed', () => existsSync(marker))
    child.kill('SIGKILL')
    await exitOf(child)
    const task = onlyTask(s.tree)
    const branch = `ctxagent/42-${task.uuid.slice(0, 8)}`
    const made = git(['rev-parse', `refs/heads/${branch}`], s.ws)
    expect(task.state.delivery_commit).toBe(made)
    // The same tree over the same parent, by someone else, with the token in its message, on the branch.
    const forged = execFileSync('git', ['-c', 'safe.directory=*', 'commit-tree', `${made}^{tree}`, '-p', s.first, '-m', `Fixed add.\n\n${gh.token}`], {
      cwd: s.ws,
      env: {
        PATH: process.env.PATH,
        HOME: '/nonexistent',
        GIT_AUTHOR_NAME: 'Mallory',
        GIT_AUTHOR_EMAIL: 'm@evil.example',
        GIT_COMMITTER_NAME: 'Mallory',
        GIT_COMMITTER_EMAIL: 'm@evil.example',
      },
      encoding: 'utf8',
    }).trim()
    git(['update-ref', `refs/heads/${branch}`, forged], s.ws)
    giveToSandbox(s.ws)
    const res = await s.cli(['run', '--resume', task.uuid, '--json'])
    expect(res.code, res.stderr).toBe(0)
    const done = onlyTask(s.tree)
    expect(done.state.delivery).toMatchObject({ branch, commit: made, pushed: true, refused: null })
    expect(git(['--git-dir', s.bare, 'rev-parse', `refs/heads/${branch}`], '/')).toBe(made)
    expect(() => git(['--git-dir', s.bare, 'cat-file', '-e', forged], '/')).toThrow()
    expect(git(['rev-parse', `refs/heads/${branch}`], s.ws)).toBe(made)
    expect(gh.pulls).toHaveLength(1)
  })
})
