import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, expect, it, onTestFinished } from 'vitest'
import { exitOf } from '../helpers/wait.js'
import { onlyTask, waitFor } from '../run/harness.js'
import { branches, deliverySetup, FIXED, git, runOf, write } from './setup.js'

describe('only a task that completed with its answer delivers', () => {
  it('nothing for a blocked finish, a failed task, a task out of budget, or a paused one', { timeout: 240_000 }, async () => {
    const cases: { name: string; args: string[]; replies: (s: Awaited<ReturnType<typeof deliverySetup>>) => void; status: string }[] = [
      {
        name: 'blocked',
        args: [],
        status: 'completed',
        replies: (s) =>
          s.fake.queue.push(write('calc.js', FIXED), { calls: [{ name: 'finish', arguments: { summary: 'cannot test it', status: 'blocked' } }] }),
      },
      {
        name: 'failed',
        args: [],
        status: 'failed',
        replies: (s) => {
          s.fake.queue.push(write('calc.js', FIXED))
          s.fake.fallback = () => ({ calls: [{ name: 'read_file', arguments: { path: 'README.md' } }] })
        },
      },
      {
        name: 'timeout',
        args: ['--max-turns', '2'],
        status: 'timeout',
        replies: (s) => {
          s.fake.queue.push(write('calc.js', FIXED))
          s.fake.fallback = () => ({ calls: [{ name: 'glob', arguments: { pattern: `*${Math.random()}` } }] })
        },
      },
    ]
    for (const c of cases) {
      const s = await deliverySetup('path')
      c.replies(s)
      const res = await s.cli(['run', '--task', 'fix add', '--workspace', s.ws, '--deliver', 'pr', '--json', ...c.args])
      const task = onlyTask(s.tree)
      expect(task.state.status, `${c.name}: ${res.stderr}`).toBe(c.status)
      expect(task.state.delivery, c.name).toBeUndefined()
      expect(branches(join(s.ws, '.git')), c.name).toEqual(['main'])
      expect(branches(s.bare), c.name).toEqual(['main'])
    }
    // Paused by an operator mid-task: nothing; its resume to the end delivers.
    const s = await deliverySetup('path')
    s.fake.queue.push(write('calc.js', FIXED))
    let slow = true
    s.fake.fallback = () => (slow ? { delayMs: 100, calls: [{ name: 'glob', arguments: { pattern: `*${Math.random()}` } }] } : { content: 'Fixed add.' })
    const child = s.spawn(['run', '--task', 'fix add', '--workspace', s.ws, '--deliver', 'branch'])
    // The change is made in the task's worktree, never in the checkout.
    await waitFor(
      'the change',
      () => s.tree.layout.list('running').length === 1 && readFileSync(join(runOf(onlyTask(s.tree)).workspace, 'calc.js'), 'utf8') === FIXED,
    )
    const uuid = onlyTask(s.tree).uuid
    expect((await s.cli(['pause', uuid])).code).toBe(0)
    await exitOf(child)
    expect(onlyTask(s.tree)).toMatchObject({ location: 'paused', state: { status: 'paused' } })
    expect(onlyTask(s.tree).state.delivery).toBeUndefined()
    expect(branches(join(s.ws, '.git'))).toEqual(['main'])
    slow = false
    const res = await s.cli(['run', '--resume', uuid, '--json'])
    expect(res.code, res.stderr).toBe(0)
    expect(JSON.parse(res.stdout).delivery).toMatchObject({ mode: 'branch', branch: `ctxagent/task-${uuid.slice(0, 8)}`, refused: null })
    expect(branches(join(s.ws, '.git')).length).toBe(2)
  })

  it('--deliver on a workspace that is no repository, or pr without an origin: refused before any task exists (exit 2)', async () => {
    const s = await deliverySetup('path')
    git(['remote', 'remove', 'origin'], s.ws)
    const noOrigin = await s.cli(['run', '--task', 't', '--workspace', s.ws, '--deliver', 'pr'])
    expect(noOrigin.code).toBe(2)
    expect(noOrigin.stderr).toContain('has none')
    const bare = mkdtempSync(join(tmpdir(), 'ctxagent-plain-'))
    onTestFinished(() => rmSync(bare, { recursive: true, force: true }))
    const plain = await s.cli(['run', '--task', 't', '--workspace', bare, '--deliver', 'branch'])
    expect(plain.code).toBe(2)
    expect(plain.stderr).toContain('needs a git repository')
    expect(existsSync(join(s.tree.base, 'running')) ? s.tree.layout.list('running') : []).toEqual([])
    expect(s.tree.layout.list('completed')).toEqual([])
  })
})

describe('a stop during delivery', () => {
  it('a first Ctrl-C once the task has answered does not pause it: the line says so, the change is delivered, the run exits 0', {
    timeout: 240_000,
  }, async () => {
    const s = await deliverySetup('path')
    s.fake.queue.push(write('calc.js', FIXED), { content: 'Fixed add.' })
    const markerDir = mkdtempSync(join(tmpdir(), 'ctxagent-marker-'))
    onTestFinished(() => rmSync(markerDir, { recursive: true, force: true }))
    const marker = join(markerDir, 'held')
    const child = s.spawn(['run', '--task', 'fix add', '--workspace', s.ws, '--deliver', 'branch', '--log-format', 'text'], {
      CTXAGENT_TEST_HOLD_AT: 'run:delivering',
      CTXAGENT_TEST_HOLD_MARKER: marker,
    })
    let stderr = ''
    child.stderr?.on('data', (d: Buffer) => (stderr += d.toString()))
    await waitFor('the run at its delivery', () => existsSync(marker))
    child.kill('SIGINT')
    await waitFor('the line about the stop', () => stderr.includes('SIGINT: the task has its answer and is not paused'))
    expect(stderr).not.toContain('pausing at once')
    rmSync(marker)
    expect((await exitOf(child)).code).toBe(0)
    const task = onlyTask(s.tree)
    expect(task.location).toBe('completed')
    expect(task.state.delivery).toMatchObject({ mode: 'branch', refused: null })
    expect(branches(join(s.ws, '.git')).length).toBe(2)
  })
})

describe('a crash during delivery', () => {
  for (const step of ['deliver-committed', 'deliver-pushed']) {
    it(`SIGKILL at ${step}: the resume delivers with the same commit, one branch and one PR`, { timeout: 180_000 }, async () => {
      const s = await deliverySetup('github')
      s.fake.queue.push(write('calc.js', FIXED), { content: 'Fixed add.' })
      const markerDir = mkdtempSync(join(tmpdir(), 'ctxagent-marker-'))
      onTestFinished(() => rmSync(markerDir, { recursive: true, force: true }))
      const marker = join(markerDir, 'at')
      const child = s.spawn(['run', '--github', 'acme/shop#42', '--workspace', s.ws, '--deliver', 'pr'], {
        CTXAGENT_TEST_PAUSE_AT: step,
        CTXAGENT_TEST_PAUSE_MARKER: marker,
      })
      await waitFor(`the agent at ${step}`, () => existsSync(marker))
      child.kill('SIGKILL')
      await exitOf(child)
      const task = onlyTask(s.tree)
      expect(task.location).toBe('running')
      expect(task.state.delivery).toBeUndefined()
      const branch = `ctxagent/42-${task.uuid.slice(0, 8)}`
      const committed = git(['rev-parse', `refs/heads/${branch}`], s.ws)
      expect(branches(s.bare).includes(branch)).toBe(step === 'deliver-pushed')
      const gh = s.gh as NonNullable<typeof s.gh>
      expect(gh.pulls).toHaveLength(0)
      const res = await s.cli(['run', '--resume', task.uuid, '--json'])
      expect(res.code, res.stderr).toBe(0)
      const done = onlyTask(s.tree)
      expect(done.location).toBe('completed')
      expect(done.state.delivery).toEqual({ mode: 'pr', branch, commit: committed, pushed: true, pr: { number: 100, url: expect.any(String) }, refused: null })
      expect(gh.pulls).toHaveLength(1)
      expect(branches(s.bare).sort()).toEqual([branch, 'main'].sort())
      expect(git(['--git-dir', s.bare, 'rev-parse', `refs/heads/${branch}`], '/')).toBe(committed)
      expect(branches(join(s.ws, '.git')).sort()).toEqual([branch, 'main'].sort())
    })
  }
})
