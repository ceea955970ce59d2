import { chmodSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, expect, it, onTestFinished } from 'vitest'
import { onlyTask } from '../run/harness.js'
import { giveToSandbox } from '../helpers/sandbox-owner.js'
import { branches, deliverySetup, filesHolding, FIXED, git, runOf, write } from './setup.js'

const SECRET = 'Zq7vN2pL9xK4wR8tY6uB3mC5'

describe('what is not delivered', () => {
  it('a diff holding the value of a secret in force: refused by name (never the value), nothing committed or pushed, the files kept', async () => {
    const s = await deliverySetup('path')
    s.fake.queue.push(write('calc.js', FIXED), write('deploy.cfg', `url=https://deploy.example\nkey=${SECRET}\n`, false), {
      content: 'Fixed add and wrote the deploy config.',
    })
    const res = await s.cli(['run', '--task', 'fix add', '--workspace', s.ws, '--deliver', 'pr', '--json'], { DEPLOY_TOKEN: SECRET })
    // Completed, not delivered: exit 6 (docs/contract.md §9).
    expect(res.code, res.stderr).toBe(6)
    const task = onlyTask(s.tree)
    const delivery = task.state.delivery as { refused: string }
    expect(delivery).toMatchObject({ mode: 'pr', branch: null, commit: null, pushed: false, pr: null })
    expect(delivery.refused).toContain('deploy.cfg holds DEPLOY_TOKEN')
    expect(res.stdout + res.stderr).not.toContain(SECRET)
    expect(filesHolding(task.dir, SECRET)).toEqual([])
    // Nothing committed or pushed; the task's worktree keeps the agent's files for a person to fix, the checkout untouched.
    expect(branches(join(s.ws, '.git'))).toEqual(['main'])
    expect(branches(s.bare)).toEqual(['main'])
    const tree = runOf(task).workspace
    expect(readFileSync(join(tree, 'deploy.cfg'), 'utf8')).toContain(SECRET)
    expect(readFileSync(join(tree, 'calc.js'), 'utf8')).toBe(FIXED)
    expect(git(['status', '--porcelain'], tree).split('\n').sort()).toEqual(['?? deploy.cfg', 'M calc.js'])
    expect(git(['status', '--porcelain'], s.ws)).toBe('')
  })

  it('an .env file (deliver.exclude) and a key pattern: refused, nothing pushed; a file over max_file_bytes too', async () => {
    const s = await deliverySetup('path', 'deliver:\n  max_file_bytes: 1000\n')
    s.fake.queue.push(
      write('.env', 'DEBUG=1\n', false),
      write('big.txt', 'x'.repeat(2000), false),
      write('notes.md', 'token: ghp_abcdefghijklmnopqrstuvwxyz0123456789\n', false),
      { content: 'done' },
    )
    const res = await s.cli(['run', '--task', 'set up', '--workspace', s.ws, '--deliver', 'pr', '--json'])
    expect(res.code, res.stderr).toBe(6)
    const refused = String((onlyTask(s.tree).state.delivery as { refused: string }).refused)
    expect(refused).toContain('.env matches deliver.exclude (.env*)')
    expect(refused).toContain('big.txt is 2000 bytes, over deliver.max_file_bytes (1000)')
    expect(refused).toContain('notes.md holds github pattern')
    expect(branches(s.bare)).toEqual(['main'])
    expect(branches(join(s.ws, '.git'))).toEqual(['main'])
    expect(existsSync(join(runOf(onlyTask(s.tree)).workspace, '.env'))).toBe(true)
    expect(existsSync(join(s.ws, '.env'))).toBe(false)
  })

  it('a commit the forge does not have yet, holding a token, under the base: not pushed (every object a push would send is scanned)', async () => {
    const s = await deliverySetup('github')
    const token = 'ghp_unpushed0000000000000000000000000000'
    // The checkout is a commit ahead of its origin, and that commit holds a token the change itself never touches.
    writeFileSync(join(s.ws, 'notes.txt'), `token: ${token}\n`)
    git(['add', 'notes.txt'], s.ws)
    git(['commit', '--quiet', '-m', 'notes'], s.ws)
    giveToSandbox(s.ws)
    s.fake.queue.push(write('calc.js', FIXED), { content: 'Fixed add.' })
    const res = await s.cli(['run', '--github', 'acme/shop#42', '--workspace', s.ws, '--deliver', 'pr', '--json'])
    expect(res.code, res.stderr).toBe(6)
    const delivery = onlyTask(s.tree).state.delivery as { refused: string; pushed: boolean; commit: string | null }
    expect(delivery.pushed).toBe(false)
    expect(delivery.refused).toMatch(/^not pushed: the blob [0-9a-f]{12} the push would send holds github pattern/)
    expect(res.stdout + res.stderr).not.toContain(token)
    expect(branches(s.bare)).toEqual(['main'])
    expect(filesHolding(s.bare, token)).toEqual([])
    expect((s.gh as NonNullable<typeof s.gh>).pulls).toEqual([])
  })

  it('no changes: nothing committed or opened, and the outcome says so', async () => {
    const s = await deliverySetup('path')
    s.fake.queue.push({ content: 'Nothing to change: add() is right.' })
    const res = await s.cli(['run', '--task', 'check add', '--workspace', s.ws, '--deliver', 'branch', '--json'])
    expect(res.code, res.stderr).toBe(0)
    expect(JSON.parse(res.stdout).delivery).toMatchObject({ mode: 'branch', branch: null, commit: null, refused: expect.stringContaining('no changes') })
    // Nothing to deliver is no failed delivery: exit 0, said as no_changes.
    expect(JSON.parse(res.stdout).delivery_result).toBe('no_changes')
    expect(branches(join(s.ws, '.git'))).toEqual(['main'])
  })

  it('hooks, an fsmonitor, a filter and diff.external planted in the workspace never run; files written into .git stay the owner’s', async () => {
    const s = await deliverySetup('path')
    // Where a planted program would leave its mark: writable by anyone (as root, delivery's git in the workspace runs as its owner).
    const ran = mkdtempSync(join(tmpdir(), 'ctxagent-ran-'))
    chmodSync(ran, 0o777)
    onTestFinished(() => rmSync(ran, { recursive: true, force: true }))
    // In the commit the task starts from (before anything is planted): its worktree is checked out with it, and no filter runs.
    writeFileSync(join(s.ws, '.gitattributes'), '* filter=evil diff=evil\n')
    git(['add', '.gitattributes'], s.ws)
    git(['commit', '--quiet', '-m', 'attributes'], s.ws)
    const script = (name: string) => {
      const path = join(s.ws, '.git', `evil-${name}`)
      writeFileSync(path, `#!/bin/sh\ntouch ${ran}/${name}\ncat\n`)
      chmodSync(path, 0o755)
      return path
    }
    for (const hook of ['pre-commit', 'post-commit', 'reference-transaction', 'pre-push', 'post-checkout', 'post-index-change', 'pre-auto-gc']) {
      writeFileSync(join(s.ws, '.git', 'hooks', hook), `#!/bin/sh\ntouch ${ran}/hook-${hook}\n`)
      chmodSync(join(s.ws, '.git', 'hooks', hook), 0o755)
    }
    git(['config', 'filter.evil.clean', script('clean')], s.ws)
    git(['config', 'filter.evil.smudge', script('smudge')], s.ws)
    git(['config', 'filter.evil.process', script('process')], s.ws)
    git(['config', 'filter.evil.required', 'true'], s.ws)
    git(['config', 'core.fsmonitor', script('fsmonitor')], s.ws)
    git(['config', 'diff.external', script('diff')], s.ws)
    git(['config', 'core.pager', script('pager')], s.ws)
    git(['config', 'diff.evil.textconv', script('textconv')], s.ws)
    giveToSandbox(s.ws)
    s.fake.queue.push(write('calc.js', FIXED), { content: 'Fixed add.' })
    const res = await s.cli(['run', '--task', 'fix add', '--workspace', s.ws, '--deliver', 'branch', '--json'])
    expect(res.code, res.stderr).toBe(0)
    const delivery = onlyTask(s.tree).state.delivery as { branch: string; commit: string; refused: string | null }
    expect(delivery.refused).toBeNull()
    expect(git(['rev-parse', `refs/heads/${delivery.branch}`], s.ws)).toBe(delivery.commit)
    // The file went in as it is: no clean filter changed it.
    expect(git(['--no-replace-objects', 'cat-file', 'blob', `${delivery.commit}:calc.js`], s.ws)).toBe(FIXED.trim())
    expect(readdirSync(ran)).toEqual([])
    expect(git(['ls-tree', '--name-only', delivery.commit], s.ws).split('\n').sort()).toEqual(['.gitattributes', '.gitignore', 'README.md', 'calc.js'])
    // As root, nothing delivery wrote into the workspace's .git is root's (the sandbox user can still commit there).
    if (process.getuid?.() === 0) {
      const owned: string[] = []
      const walk = (dir: string): void => {
        for (const name of readdirSync(dir)) {
          const p = join(dir, name)
          if (statSync(p).uid === 0) owned.push(p)
          if (statSync(p).isDirectory()) walk(p)
        }
      }
      walk(join(s.ws, '.git'))
      expect(owned).toEqual([])
    }
    // The plants are live: the workspace's own git runs them (so the test above could fail).
    try {
      git(['add', 'calc.js'], s.ws)
    } catch {
      // The planted process filter speaks no filter protocol: git gives up after starting it.
    }
    expect(readdirSync(ran).length).toBeGreaterThan(0)
  })
})
