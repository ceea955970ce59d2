import { execFileSync } from 'node:child_process'
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, expect, it, onTestFinished } from 'vitest'
import { startFakeGithub, githubUser } from '../helpers/fake-github.js'
import type { FakeGithub } from '../helpers/fake-github.js'
import { gitHttpHandler } from '../helpers/git-http.js'
import type { GitHandler } from '../helpers/git-http.js'
import { cliAsync } from '../helpers/run.js'

const GIT_ENV = {
  PATH: process.env.PATH,
  HOME: '/nonexistent',
  GIT_CONFIG_NOSYSTEM: '1',
  GIT_CONFIG_GLOBAL: '/dev/null',
  GIT_AUTHOR_NAME: 'Dev',
  GIT_AUTHOR_EMAIL: 'dev@example.org',
  GIT_COMMITTER_NAME: 'Dev',
  GIT_COMMITTER_EMAIL: 'dev@example.org',
}

const BUGGY = 'export const add = (a, b) => a - b\nexport const mul = (a, b) => a + b\n'
// Runs every test/*.test.mjs: a throw (a failed assertion) exits 1.
const RUNNER =
  "import { readdirSync } from 'node:fs'\nfor (const f of readdirSync('test').filter((n) => n.endsWith('.test.mjs')).sort()) await import('./' + f)\n"
const STATEMENT_MARK = 'ISSUE-TEXT-7c31'

/**
 * A repository served by `git http-backend` on the GitHub stand-in's host (the token
 * required), whose main holds three merged pull requests, each with its head under
 * refs/pull/N/head as GitHub serves it: #1 fixes add() with a test that fails before
 * (closes issue #10), #2 changes code with no test, #3 adds a test that already passes.
 */
async function forge(): Promise<{ gh: FakeGithub; root: string; bases: Record<number, string> }> {
  const root = mkdtempSync(join(tmpdir(), 'ctxagent-eval-make-'))
  onTestFinished(() => rmSync(root, { recursive: true, force: true }))
  const served = join(root, 'served')
  let handler: GitHandler = () => undefined
  const gh = await startFakeGithub({ git: (req, res) => handler(req, res) })
  handler = gitHttpHandler(served, 'x-access-token', gh.token, [])
  const work = join(root, 'work')
  mkdirSync(join(work, 'test'), { recursive: true })
  mkdirSync(join(work, '.ctxagent'))
  const git = (...args: string[]): string => execFileSync('git', args, { cwd: work, env: GIT_ENV, encoding: 'utf8' }).trim()
  writeFileSync(join(work, 'calc.js'), BUGGY)
  writeFileSync(join(work, 'test', 'run.mjs'), RUNNER)
  writeFileSync(join(work, '.ctxagent', 'environment.yml'), 'test: node test/run.mjs\n')
  writeFileSync(join(work, 'README.md'), 'calc\n')
  git('init', '-q', '-b', 'main')
  git('add', '.')
  git('commit', '-qm', 'calc')
  const bases: Record<number, string> = {}
  const heads: Record<number, string> = {}
  const branch = (n: number, change: () => void): void => {
    bases[n] = git('rev-parse', 'HEAD')
    git('checkout', '-qb', `pr-${n}`)
    change()
    git('add', '.')
    git('commit', '-qm', `pull request ${n}`)
    heads[n] = git('rev-parse', 'HEAD')
    git('checkout', '-q', 'main')
    git('merge', '-q', '--no-ff', '-m', `Merge #${n}`, `pr-${n}`)
  }
  branch(1, () => {
    writeFileSync(join(work, 'calc.js'), BUGGY.replace('a - b', 'a + b'))
    writeFileSync(join(work, 'test', 'add.test.mjs'), "import { add } from '../calc.js'\nif (add(2, 3) !== 5) throw new Error('add is wrong')\n")
  })
  branch(2, () => writeFileSync(join(work, 'calc.js'), `// calc\n${readFileSync(join(work, 'calc.js'), 'utf8')}`))
  branch(3, () => {
    writeFileSync(join(work, 'README.md'), 'calc: add and mul\n')
    writeFileSync(join(work, 'test', 'mul.test.mjs'), "import { mul } from '../calc.js'\nif (mul(0, 0) !== 0) throw new Error('mul is wrong')\n")
  })
  const bare = join(served, 'acme', 'shop.git')
  mkdirSync(join(served, 'acme'), { recursive: true })
  execFileSync('git', ['clone', '-q', '--bare', work, bare], { env: GIT_ENV })
  for (const n of [1, 2, 3]) execFileSync('git', ['--git-dir', bare, 'update-ref', `refs/pull/${n}/head`, heads[n] as string], { env: GIT_ENV })
  const bodies: Record<number, string> = { 1: 'Fixes #10 <!-- ctxagent:00000000-0000-0000-0000-000000000000 -->', 2: 'A comment.', 3: 'Docs and a test.' }
  for (const n of [1, 2, 3]) {
    const statuses = git('diff', '--name-status', '--no-renames', bases[n] as string, heads[n] as string)
    gh.pullFiles[n] = statuses.split('\n').map((line, i) => {
      const [status, filename] = line.split('\t')
      return { sha: `f${n}${i}`, filename, status: status === 'A' ? 'added' : status === 'D' ? 'removed' : 'modified', additions: 1, deletions: 0, changes: 1 }
    })
    gh.pulls.push({
      id: 7000 + n,
      number: n,
      state: 'closed',
      title: `Change ${n}`,
      body: bodies[n],
      user: githubUser('dev', 5),
      head: { ref: `pr-${n}`, sha: heads[n] },
      base: { ref: 'main', sha: bases[n] },
      html_url: `https://github.example/acme/shop/pull/${n}`,
      created_at: '2026-11-01T09:00:00Z',
      updated_at: `2026-11-0${n + 1}T09:00:00Z`,
      closed_at: `2026-11-0${n + 1}T09:00:00Z`,
      merged_at: `2026-11-0${n + 1}T09:00:00Z`,
    })
  }
  // A pull request closed without being merged is no change of the repository's.
  gh.pulls.push({ ...gh.pulls[0], id: 7009, number: 9, merged_at: null, html_url: 'https://github.example/acme/shop/pull/9' })
  gh.issues[10] = {
    id: 10,
    number: 10,
    title: 'add() subtracts',
    body: `${STATEMENT_MARK}: 2 + 3 gives -1.`,
    state: 'closed',
    user: githubUser('alice', 1),
    labels: [],
    html_url: 'https://github.example/acme/shop/issues/10',
  }
  return { gh, root, bases }
}

describe('ctxagent eval make', () => {
  it('on a stand-in forge with three merged pull requests (one without tests, one whose tests pass before the fix) makes exactly the one valid task', async () => {
    const { gh, root, bases } = await forge()
    const home = join(root, 'home')
    const config = join(root, 'config.yaml')
    writeFileSync(config, `github:\n  api_url: ${gh.url}\n  token: ${gh.token}\n`)
    const out = join(root, 'suite')
    const res = await cliAsync(['--home', home, '--config', config, '--json', 'eval', 'make', '--github', 'acme/shop', '--out', out])
    expect(res.stderr).not.toMatch(/ctxagent: (?!warning)/)
    expect(res.code).toBe(0)
    const doc = JSON.parse(res.stdout) as {
      made: { task: string; from: string; commit: string; check: string; tests: string[] }[]
      left_out: { from: string; why: string }[]
    }
    expect(doc.made).toEqual([
      expect.objectContaining({ task: 'pr-1', from: 'acme/shop#1', commit: bases[1], check: 'node test/run.mjs', tests: ['test/add.test.mjs'] }),
    ])
    expect(doc.left_out.map((l) => [l.from, l.why]).sort()).toEqual([
      ['acme/shop#2', 'it changed no test file'],
      ['acme/shop#3', 'its check passes on the starting tree: it measures nothing'],
    ])
    expect(readdirSync(out)).toEqual(['pr-1'])
    const task = join(out, 'pr-1')
    expect(readdirSync(join(task, 'tests'), { recursive: true }).sort()).toEqual(['test', 'test/add.test.mjs'])
    const yaml = readFileSync(join(task, 'task.yaml'), 'utf8')
    // The statement is the closed issue's text, quoted as data; the repository is the clone URL.
    expect(yaml).toContain(`> ${STATEMENT_MARK}: 2 + 3 gives -1.`)
    expect(yaml).toContain(`repo: ${gh.url}/acme/shop.git`)
    expect(yaml).not.toContain('ctxagent:0000')
    const solution = readFileSync(join(task, 'solution.patch'), 'utf8')
    expect(solution).toContain('+export const add = (a, b) => a + b')
    expect(solution).not.toContain('add.test.mjs')
    // What was made is a suite `eval check` accepts on its own, cloning with the token.
    const checked = await cliAsync(['--home', home, '--config', config, '--json', 'eval', 'check', out])
    expect(checked.code).toBe(0)
    expect(JSON.parse(checked.stdout)).toMatchObject({ tasks: [{ task: 'pr-1', ok: true, solution: true }] })
    // Again: the task already there is kept and not made twice.
    const again = await cliAsync(['--home', home, '--config', config, '--json', 'eval', 'make', '--github', 'acme/shop', '--out', out])
    expect(again.code).toBe(0)
    expect(JSON.parse(again.stdout).made).toEqual([])
    expect(existsSync(join(out, '.making-pr-1'))).toBe(false)
  })
})
