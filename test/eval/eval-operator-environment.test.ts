import { spawn } from 'node:child_process'
import { existsSync, mkdirSync, readFileSync, realpathSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it, onTestFinished } from 'vitest'
import { startFakeLlm } from '../helpers/fake-llm.js'
import type { FakeLlm, RecordedRequest, Reply } from '../helpers/fake-llm.js'
import { started, stopCleanly } from '../helpers/fleet-worker.js'
import { BIN, cliAsync, ROOT, TEST_ENV } from '../helpers/run.js'
import { usePostgres } from '../helpers/use-postgres.js'
import { git, makeOrigin } from '../workspace/repo.js'
import { CALC_BUGGY, CALC_FIX, CALC_FIXED, ENVIRONMENT, LEFTPAD, NEEDS_LEFTPAD, task, top } from './environment-suite.js'
import type { Checked } from './environment-suite.js'

/*
 * The operator's `environments:` for an eval's repository (docs/eval.md#a-trial,
 * docs/environments.md#the-file), through the real CLI: a task's repository is matched as a
 * `run` on it would be (a URL by its owner/repo, a local repository by its path), so its entry's
 * setup prepares `eval check`'s starting trees, each trial's task (`eval run`, and a fleet's
 * `eval trial` job) and so its check; a task on a repository with no entry has no environment,
 * as before. Each repository vendors a package only the entry's setup installs, and each check needs it.
 */

const database = usePostgres({ truncate: ['fleet_jobs', 'fleet_workers', 'tasks'] })

/** The operator's entry for `key`: the environment that installs the vendored package. */
const entry = (key: string) => `  ${JSON.stringify(key)}:\n${ENVIRONMENT.replace(/^(?=.)/gm, '    ')}`

/** A repository as a URL whose last two steps are acme/shop, its own file giving only `test` (read at the starting commit). */
function shopUrl(dir: string): { repo: string; commit: string } {
  const origin = makeOrigin({ 'calc.js': CALC_BUGGY, ...LEFTPAD, '.ctxagent/environment.yml': 'test: node --version\n' })
  const bare = join(dir, 'forge', 'acme', 'shop.git')
  mkdirSync(join(bare, '..'), { recursive: true })
  git(dir, 'clone', '--quiet', '--bare', origin.bare, bare)
  return { repo: `file://${bare}`, commit: git(bare, 'rev-parse', 'main').trim() }
}

/** A local repository (a path in task.yaml), with no environment file. */
function localRepo(): { repo: string; commit: string } {
  const origin = makeOrigin({ 'calc.js': CALC_BUGGY, ...LEFTPAD })
  return { repo: origin.bare, commit: git(origin.bare, 'rev-parse', 'main').trim() }
}

/** Every agent reads calc.js, writes the fix and finishes. */
function fixer(fake: FakeLlm): void {
  fake.fallback = (req: RecordedRequest): Reply => {
    const turn = req.body.messages.filter((m) => m.role === 'assistant').length
    if (!req.body.tools) return { content: '## Original Task\nsummary' }
    if (turn === 0) return { calls: [{ name: 'read_file', arguments: { path: 'calc.js' } }] }
    if (turn === 1) return { calls: [{ name: 'write_file', arguments: { path: 'calc.js', content: CALC_FIXED } }] }
    return { calls: [{ name: 'finish', arguments: { summary: 'done' } }] }
  }
}

const spec = { check: 'node check.mjs', tests: { 'check.mjs': NEEDS_LEFTPAD }, solution: CALC_FIX }

interface Trial {
  task: string
  passed: boolean
  status: string
  uuid: string
  check: { tail: string } | null
}

const trialsOf = (stdout: string): Trial[] => (JSON.parse(stdout) as { variants: { trials: Trial[] }[] }).variants.flatMap((v) => v.trials)
const stateOf = (home: string, uuid: string) =>
  JSON.parse(readFileSync(join(home, 'completed', uuid, 'state.json'), 'utf8')) as { environment?: Record<string, unknown> }

describe("the operator's environments for an eval's repository", () => {
  it('eval check and eval run give a URL repository its owner/repo entry and a local one its path entry; a repository with no entry has no environment', {
    timeout: 300_000,
  }, async () => {
    const dir = top('ctxagent-eval-openv-')
    const shop = shopUrl(dir)
    const local = localRepo()
    const other = localRepo()
    const suite = join(dir, 'suite')
    task(suite, 'shop', { ...shop, ...spec })
    task(suite, 'local', { ...local, ...spec })
    task(suite, 'other', { ...other, ...spec })
    const fake = await startFakeLlm()
    fixer(fake)
    const config = join(dir, 'config.yaml')
    writeFileSync(config, fake.configYaml(`environments:\n${entry('acme/shop')}${entry(realpathSync(local.repo))}`))
    const home = join(dir, 'home')

    const checked = await cliAsync(['--home', home, '--config', config, '--json', 'eval', 'check', suite])
    expect(checked.code, checked.stderr).toBe(1)
    expect((JSON.parse(checked.stdout) as Checked).tasks).toEqual([
      { task: 'local', ok: true, solution: true },
      {
        task: 'other',
        ok: false,
        why: 'its check fails with solution.patch applied (exit 1: leftpad is not installed): the check or the solution is wrong',
      },
      { task: 'shop', ok: true, solution: true },
    ])

    const res = await cliAsync([
      '--home',
      home,
      '--config',
      config,
      '--json',
      'eval',
      'run',
      suite,
      '--variant',
      'fix=model=fix-model',
      '--work-dir',
      join(dir, 'work'),
    ])
    expect(res.code, res.stderr).toBe(0)
    const trials = trialsOf(res.stdout)
    const trial = (name: string) => trials.find((t) => t.task === name) as Trial
    // The entry's setup reached each trial's task, merged over the repository's own file read at the starting commit.
    expect(trial('shop'), JSON.stringify(trial('shop'))).toMatchObject({ passed: true, status: 'completed' })
    expect(stateOf(home, trial('shop').uuid).environment).toMatchObject({
      status: 'ready',
      operator: 'acme/shop',
      file: expect.stringMatching(/^\.ctxagent\/environment\.yml \(HEAD at [0-9a-f]{12}\)$/) as unknown,
      test: 'node --version',
      restored: ['node_modules'],
      // eval check ran this setup: the trial's task is keyed by the same repository, so it restores that result.
      cache: 'hit',
    })
    expect(trial('local')).toMatchObject({ passed: true, status: 'completed' })
    expect(stateOf(home, trial('local').uuid).environment).toMatchObject({
      status: 'ready',
      operator: realpathSync(local.repo),
      file: null,
      restored: ['node_modules'],
      cache: 'hit',
    })
    // No entry matches: no environment, as before; the agent's fix is there, the package is not.
    expect(trial('other')).toMatchObject({ passed: false, status: 'completed' })
    expect(trial('other').check?.tail).toContain('leftpad is not installed')
    expect(stateOf(home, trial('other').uuid).environment).toBeUndefined()
  })

  it("a fleet's eval trial job gives its task the owner/repo entry, and its check passes with what the entry's setup installed", {
    timeout: 300_000,
  }, async () => {
    const dir = top('ctxagent-eval-openv-')
    const suite = join(dir, 'suite')
    task(suite, 'shop', { ...shopUrl(dir), ...spec })
    const fake = await startFakeLlm()
    fixer(fake)
    const workspaces = join(dir, 'workspaces')
    mkdirSync(workspaces, { mode: 0o711 })
    const home = join(dir, 'home')
    const config = join(dir, 'config.yaml')
    writeFileSync(config, fake.configYaml(`environments:\n${entry('acme/shop')}fleet:\n  workspaces_dir: ${JSON.stringify(workspaces)}\n`))
    const child = spawn(process.execPath, [BIN, '--home', home, '--config', config, 'worker'], {
      cwd: ROOT,
      env: { ...process.env, ...TEST_ENV, ...database.env() },
      stdio: ['ignore', 'ignore', 'pipe'],
    })
    let err = ''
    child.stderr.on('data', (d: Buffer) => (err += d.toString()))
    onTestFinished(() => {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL')
    })
    const worker = await started({ child, err: () => err })
    const res = await cliAsync(
      ['--home', home, '--config', config, '--json', 'eval', 'run', suite, '--variant', 'fix=model=fix-model', '--enqueue'],
      database.env(),
    )
    expect(res.code, `${res.stderr}\n${err}`).toBe(0)
    const [trial] = trialsOf(res.stdout)
    expect(trial, JSON.stringify(trial)).toMatchObject({ task: 'shop', passed: true, status: 'completed' })
    expect(trial?.check?.tail).toContain('CHECK-PASSED')
    expect(stateOf(home, trial?.uuid ?? '').environment).toMatchObject({ status: 'ready', operator: 'acme/shop', restored: ['node_modules'], cache: 'miss' })
    await stopCleanly(worker)
  })

  it("run refuses an --environment-of that is no environments key (the trial's flag): one line, exit 2, no task", async () => {
    const dir = top('ctxagent-eval-openv-')
    const fake = await startFakeLlm()
    const config = join(dir, 'config.yaml')
    writeFileSync(config, fake.configYaml())
    const home = join(dir, 'home')
    const res = await cliAsync(['--home', home, '--config', config, 'run', '--task', 'look', '--workspace', dir, '--environment-of', 'shop'])
    expect(res.code).toBe(2)
    expect(res.stderr.trim()).toBe('ctxagent: --environment-of shop is not owner/repo or an absolute path (name the repository as environments: keys do)')
    expect(existsSync(home)).toBe(false)
    expect(fake.requests).toHaveLength(0)
  })
})
