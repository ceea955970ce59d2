import { appendFileSync, existsSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { giveToSandbox } from '../helpers/sandbox-owner.js'
import { onlyTask, readTask } from '../run/harness.js'
import { branches, deliverySetup, FIXED, git, runOf, write } from './setup.js'

// docs/delivery.md#what-a-task-starts-from: a delivering task works on a tree of its own.

describe('only what the agent changed is delivered', () => {
  it("a dirty checkout: the operator's modified and untracked files are neither delivered nor touched; the task said what it started from", {
    timeout: 240_000,
  }, async () => {
    const s = await deliverySetup('github')
    // The operator's work in progress: a half-edited README and an untracked note.
    writeFileSync(join(s.ws, 'README.md'), '# calc\n\nadd(a, b) adds two numbers. TODO: say more\n')
    writeFileSync(join(s.ws, 'notes-wip.md'), 'my notes, not for anyone yet\n')
    giveToSandbox(s.ws)
    const statusBefore = git(['status', '--porcelain'], s.ws)
    expect(
      statusBefore
        .split('\n')
        .map((l) => l.trim())
        .sort(),
    ).toEqual(['?? notes-wip.md', 'M README.md'])
    s.fake.queue.push(write('calc.js', FIXED), { content: 'add() adds now.' })
    const res = await s.cli(['run', '--github', 'acme/shop#42', '--workspace', s.ws, '--deliver', 'pr', '--json'])
    expect(res.code, res.stderr).toBe(0)
    const task = onlyTask(s.tree)
    const delivery = task.state.delivery as { commit: string; refused: string | null }
    expect(delivery.refused).toBeNull()
    // The pushed commit holds the agent's change and nothing of the operator's.
    expect(git(['--git-dir', s.bare, 'diff', '--name-only', s.first, delivery.commit], '/')).toBe('calc.js')
    expect(git(['--git-dir', s.bare, 'show', `${delivery.commit}:README.md`], '/')).toBe('# calc\n\nadd(a, b) adds two numbers.')
    // The operator's files are as they were, and the agent's change is not among them.
    expect(git(['status', '--porcelain'], s.ws)).toBe(statusBefore)
    expect(readFileSync(join(s.ws, 'README.md'), 'utf8')).toContain('TODO: say more')
    expect(readFileSync(join(s.ws, 'notes-wip.md'), 'utf8')).toBe('my notes, not for anyone yet\n')
    expect(readFileSync(join(s.ws, 'calc.js'), 'utf8')).not.toBe(FIXED)
    // What the agent saw: the commit's files only.
    expect(JSON.stringify(s.fake.requests)).not.toContain('TODO: say more')
    const run = runOf(task)
    expect(run.starts_from).toMatchObject({ kind: 'worktree', workspace: s.ws, commit: s.first })
    expect(res.stderr).toContain(`starts from commit ${s.first.slice(0, 12)} of ${s.ws}, in a worktree of its own`)
  })

  it("two tasks on one workspace: the second delivers nothing of the first's leftovers; the first's worktree stays for its resume until cleanup deletes the task", {
    timeout: 300_000,
  }, async () => {
    const s = await deliverySetup('path')
    // The first task edits, then runs out of turns: no delivery, its change left where it worked.
    s.fake.queue.push(write('calc.js', FIXED))
    s.fake.fallback = () => ({ calls: [{ name: 'glob', arguments: { pattern: `*${Math.random()}` } }] })
    const first = await s.cli(['run', '--task', 'fix add', '--workspace', s.ws, '--deliver', 'branch', '--max-turns', '2', '--json'])
    expect(first.code).toBe(5)
    const firstTask = onlyTask(s.tree)
    const firstTree = String(runOf(firstTask).starts_from?.worktree)
    expect(readFileSync(join(firstTree, 'calc.js'), 'utf8')).toBe(FIXED)
    // The second task's own edit fails (outside the workspace): it changed nothing.
    s.fake.queue.push({ calls: [{ name: 'write_file', arguments: { path: '/etc/ctxagent-not-here', content: 'x' } }] }, { content: 'I could not edit it.' })
    s.fake.fallback = () => ({ content: 'summary' })
    const second = await s.cli(['run', '--task', 'fix add again', '--workspace', s.ws, '--deliver', 'branch', '--json'])
    expect(second.code, second.stderr).toBe(0)
    expect(JSON.parse(second.stdout).delivery).toMatchObject({ branch: null, commit: null, refused: expect.stringContaining('no changes') })
    expect(branches(join(s.ws, '.git'))).toEqual(['main'])
    expect(readFileSync(join(s.ws, 'calc.js'), 'utf8')).not.toBe(FIXED)
    // The second's worktree (it held nothing) is gone; the first's is found again by its resume.
    const secondUuid = (JSON.parse(second.stdout) as { uuid: string }).uuid
    expect(existsSync(String(runOf(readTask(s.tree, secondUuid)).starts_from?.worktree))).toBe(false)
    expect(runOf(readTask(s.tree, firstTask.uuid)).workspace).toBe(firstTree)
    // cleanup deletes the first task, and its worktree with it.
    const cleaned = await s.cli(['cleanup', '--delete-after', '0s', '--json'])
    expect(cleaned.code, cleaned.stderr).toBe(0)
    expect(existsSync(firstTree)).toBe(false)
    expect(
      git(['worktree', 'list', '--porcelain'], s.ws)
        .split('\n')
        .filter((l) => l.startsWith('worktree ')),
    ).toEqual([`worktree ${s.ws}`])
  })

  it("the repository's info/exclude is respected (and .gitignore): an excluded file the agent wrote is not delivered", { timeout: 240_000 }, async () => {
    const s = await deliverySetup('path')
    appendFileSync(join(s.ws, '.git', 'info', 'exclude'), 'scratch.log\n')
    s.fake.queue.push(write('calc.js', FIXED), write('scratch.log', 'test output\n', false), write('build/out.js', 'built\n', false), {
      content: 'Fixed add.',
    })
    const res = await s.cli(['run', '--task', 'fix add', '--workspace', s.ws, '--deliver', 'branch', '--json'])
    expect(res.code, res.stderr).toBe(0)
    const delivery = JSON.parse(res.stdout).delivery as { commit: string; refused: string | null }
    expect(delivery.refused).toBeNull()
    expect(git(['diff', '--name-only', s.first, delivery.commit], s.ws)).toBe('calc.js')
  })
})
