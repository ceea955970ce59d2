import { execFileSync, spawn } from 'node:child_process'
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, expect, it, onTestFinished } from 'vitest'
import { startFakeGithub, githubUser } from '../helpers/fake-github.js'
import type { FakeGithub } from '../helpers/fake-github.js'
import { gitlabUser, startFakeGitlab } from '../helpers/fake-gitlab.js'
import type { FakeGitlab } from '../helpers/fake-gitlab.js'
import { gitHttpHandler } from '../helpers/git-http.js'
import type { GitHandler } from '../helpers/git-http.js'
import { pidsHolding } from '../helpers/processes.js'
import { BIN, cliAsync, TEST_ENV } from '../helpers/run.js'
import { exitOf, sleep, until } from '../helpers/wait.js'

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

interface Served {
  /** Each change's merge base and head, by number. */
  bases: Record<number, string>
  heads: Record<number, string>
  /** `git diff --name-status` of change n: [status letter, path]. */
  changed(n: number): [string, string][]
}

/**
 * A repository at `served/<path>` (a bare one, for `git http-backend`) whose main holds
 * three merged changes, each one's head also under `headRef(n)` as the forge serves it:
 * 1 fixes add() with a test that fails before, 2 changes code with no test, 3 adds a test
 * that already passes.
 */
function servedRepository(served: string, path: string, headRef: (n: number) => string, test = 'node test/run.mjs'): Served {
  const work = mkdtempSync(join(tmpdir(), 'ctxagent-eval-make-work-'))
  onTestFinished(() => rmSync(work, { recursive: true, force: true }))
  mkdirSync(join(work, 'test'))
  mkdirSync(join(work, '.ctxagent'))
  const git = (...args: string[]): string => execFileSync('git', args, { cwd: work, env: GIT_ENV, encoding: 'utf8' }).trim()
  writeFileSync(join(work, 'calc.js'), BUGGY)
  writeFileSync(join(work, 'test', 'run.mjs'), RUNNER)
  writeFileSync(join(work, '.ctxagent', 'environment.yml'), `test: ${test}\n`)
  writeFileSync(join(work, 'README.md'), 'calc\n')
  git('init', '-q', '-b', 'main')
  git('add', '.')
  git('commit', '-qm', 'calc')
  const bases: Record<number, string> = {}
  const heads: Record<number, string> = {}
  const branch = (n: number, change: () => void): void => {
    bases[n] = git('rev-parse', 'HEAD')
    git('checkout', '-qb', `change-${n}`)
    change()
    git('add', '.')
    git('commit', '-qm', `change ${n}`)
    heads[n] = git('rev-parse', 'HEAD')
    git('checkout', '-q', 'main')
    git('merge', '-q', '--no-ff', '-m', `Merge ${n}`, `change-${n}`)
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
  const bare = join(served, path)
  mkdirSync(join(bare, '..'), { recursive: true })
  execFileSync('git', ['clone', '-q', '--bare', work, bare], { env: GIT_ENV })
  for (const n of [1, 2, 3]) execFileSync('git', ['--git-dir', bare, 'update-ref', headRef(n), heads[n] as string], { env: GIT_ENV })
  const changed = (n: number): [string, string][] =>
    git('diff', '--name-status', '--no-renames', bases[n] as string, heads[n] as string)
      .split('\n')
      .map((line) => line.split('\t') as [string, string])
  return { bases, heads, changed }
}

/** The GitHub stand-in with the repository served on its host (the token required) and its three pull requests merged (#1 closes issue #10). */
async function github(test?: string): Promise<{ gh: FakeGithub; root: string; bases: Record<number, string> }> {
  const root = mkdtempSync(join(tmpdir(), 'ctxagent-eval-make-'))
  onTestFinished(() => rmSync(root, { recursive: true, force: true }))
  const served = join(root, 'served')
  let handler: GitHandler = () => undefined
  const gh = await startFakeGithub({ git: (req, res) => handler(req, res) })
  handler = gitHttpHandler(served, 'x-access-token', gh.token, [])
  const { bases, heads, changed } = servedRepository(served, 'acme/shop.git', (n) => `refs/pull/${n}/head`, test)
  const bodies: Record<number, string> = { 1: 'Fixes #10 <!-- ctxagent:00000000-0000-0000-0000-000000000000 -->', 2: 'A comment.', 3: 'Docs and a test.' }
  for (const n of [1, 2, 3]) {
    gh.pullFiles[n] = changed(n).map(([status, filename], i) => ({
      sha: `f${n}${i}`,
      filename,
      status: status === 'A' ? 'added' : status === 'D' ? 'removed' : 'modified',
      additions: 1,
      deletions: 0,
      changes: 1,
    }))
    gh.pulls.push({
      id: 7000 + n,
      number: n,
      state: 'closed',
      title: `Change ${n}`,
      body: bodies[n],
      user: githubUser('dev', 5),
      head: { ref: `change-${n}`, sha: heads[n] },
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

/** The GitLab stand-in likewise: three merged merge requests (!1 closes issue #10 by GitLab's closes_issues). */
async function gitlab(): Promise<{ gl: FakeGitlab; root: string; bases: Record<number, string> }> {
  const root = mkdtempSync(join(tmpdir(), 'ctxagent-eval-make-'))
  onTestFinished(() => rmSync(root, { recursive: true, force: true }))
  const served = join(root, 'served')
  let handler: GitHandler = () => undefined
  const gl = await startFakeGitlab({ git: (req, res) => handler(req, res) })
  handler = gitHttpHandler(served, 'oauth2', gl.token, [])
  const { bases, heads, changed } = servedRepository(served, 'acme/backend/api.git', (n) => `refs/merge-requests/${n}/head`)
  for (const n of [1, 2, 3]) {
    gl.mrDiffs[n] = changed(n).map(([status, path]) => ({
      old_path: path,
      new_path: path,
      a_mode: '100644',
      b_mode: '100644',
      new_file: status === 'A',
      renamed_file: false,
      deleted_file: status === 'D',
      diff: '',
    }))
    gl.mergeRequests.push({
      id: 8000 + n,
      iid: n,
      project_id: 3,
      title: `Change ${n}`,
      description: 'See the issue.',
      state: 'merged',
      source_branch: `change-${n}`,
      target_branch: 'main',
      sha: heads[n],
      merge_commit_sha: null,
      diff_refs: { base_sha: bases[n], head_sha: heads[n], start_sha: bases[n] },
      author: gitlabUser('dev'),
      created_at: '2026-11-01T09:00:00.000Z',
      updated_at: `2026-11-0${n + 1}T09:00:00.000Z`,
      merged_at: `2026-11-0${n + 1}T09:00:00.000Z`,
      web_url: `https://gitlab.example/acme/backend/api/-/merge_requests/${n}`,
    })
  }
  gl.mrClosesIssues[1] = [
    {
      id: 110,
      iid: 10,
      project_id: 3,
      title: 'add() subtracts',
      description: `${STATEMENT_MARK}: 2 + 3 gives -1.`,
      state: 'closed',
      author: gitlabUser('alice'),
    },
  ]
  return { gl, root, bases }
}

// Several ctxagent processes, git over HTTP and sandboxed checks: minutes on a busy 2-core machine, not the default minute.
const SLOW = 300_000

describe('ctxagent eval make', () => {
  it(
    'on a stand-in forge with three merged pull requests (one without tests, one whose tests pass before the fix) makes exactly the one valid task',
    async () => {
      const { gh, root, bases } = await github()
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
    },
    SLOW,
  )

  it(
    'on the GitLab stand-in makes the one valid task of three merged merge requests, its statement the issue GitLab says it closes',
    async () => {
      const { gl, root, bases } = await gitlab()
      const home = join(root, 'home')
      const config = join(root, 'config.yaml')
      writeFileSync(config, `gitlab:\n  url: ${gl.url}\n  token: ${gl.token}\n`)
      const out = join(root, 'suite')
      const res = await cliAsync(['--home', home, '--config', config, '--json', 'eval', 'make', '--gitlab', 'acme/backend/api', '--out', out])
      expect(res.stderr).not.toMatch(/ctxagent: (?!warning)/)
      expect(res.code).toBe(0)
      const doc = JSON.parse(res.stdout) as { made: { task: string; from: string; commit: string }[]; left_out: { from: string; why: string }[] }
      expect(doc.made.map((m) => [m.task, m.from, m.commit])).toEqual([['mr-1', 'acme/backend/api!1', bases[1]]])
      expect(doc.left_out.map((l) => [l.from, l.why]).sort()).toEqual([
        ['acme/backend/api!2', 'it changed no test file'],
        ['acme/backend/api!3', 'its check passes on the starting tree: it measures nothing'],
      ])
      const yaml = readFileSync(join(out, 'mr-1', 'task.yaml'), 'utf8')
      expect(yaml).toContain('# Issue acme/backend/api#10: add() subtracts')
      expect(yaml).toContain(`> ${STATEMENT_MARK}: 2 + 3 gives -1.`)
      expect(yaml).toContain(`repo: ${gl.url}/acme/backend/api.git`)
    },
    SLOW,
  )

  it(
    'a stop during a check ends it at once (no process left), makes nothing of that change and tries none after it, exits 143',
    async () => {
      const marker = `${5000 + Math.floor(Math.random() * 1000)}.${process.pid}`
      const { gh, root } = await github(`sleep ${marker}`)
      onTestFinished(() => {
        for (const pid of pidsHolding(`sleep ${marker}`)) process.kill(pid, 'SIGKILL')
      })
      const home = join(root, 'home')
      const config = join(root, 'config.yaml')
      writeFileSync(config, `github:\n  api_url: ${gh.url}\n  token: ${gh.token}\n`)
      const out = join(root, 'suite')
      const child = spawn(process.execPath, [BIN, '--home', home, '--config', config, 'eval', 'make', '--github', 'acme/shop', '--out', out], {
        env: { ...process.env, ...TEST_ENV },
        stdio: ['ignore', 'ignore', 'pipe'],
      })
      let err = ''
      child.stderr.setEncoding('utf8').on('data', (d: string) => (err += d))
      const exited = exitOf(child)
      onTestFinished(() => {
        if (child.exitCode === null) child.kill('SIGKILL')
      })
      await until("a check's sleep running", () => pidsHolding(`sleep ${marker}`).length > 0, 4000)
      child.kill('SIGTERM')
      const ended = await Promise.race([exited, sleep(120_000).then(() => null)])
      expect(ended, `eval make did not end on SIGTERM\n${err}`).not.toBeNull()
      expect(ended?.code, err).toBe(143)
      expect(err).toMatch(/ctxagent: eval make stopped: 0 task\(s\) made/)
      expect(pidsHolding(`sleep ${marker}`)).toEqual([])
      // Nothing of the change being checked is left: no task, no staging directory.
      expect(existsSync(out) ? readdirSync(out) : []).toEqual([])
    },
    SLOW,
  )
})
