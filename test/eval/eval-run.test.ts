import { spawn } from 'node:child_process'
import { execFileSync } from 'node:child_process'
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, expect, it, onTestFinished } from 'vitest'
import { startFakeLlm } from '../helpers/fake-llm.js'
import type { FakeLlm, RecordedRequest, Reply } from '../helpers/fake-llm.js'
import { BIN, cliAsync, ROOT, TEST_ENV } from '../helpers/run.js'
import { until } from '../helpers/wait.js'

const HIDDEN_MARK = 'HIDDEN-CHECK-5e1f0c'
const SOLUTION_MARK = 'SOLUTION-PATCH-a93d27'
const BUGGY = 'export const add = (a, b) => a - b\nexport const mul = (a, b) => a + b\n'

/** A repository with two bugs, and a suite of three tasks on it: add, mul, and one whose check already passes. */
function makeSuite(): { dir: string; suite: string } {
  const dir = mkdtempSync(join(tmpdir(), 'ctxagent-eval-'))
  onTestFinished(() => rmSync(dir, { recursive: true, force: true }))
  const repo = join(dir, 'repo')
  mkdirSync(repo)
  writeFileSync(join(repo, 'calc.js'), BUGGY)
  const git = (...args: string[]) =>
    execFileSync('git', args, {
      cwd: repo,
      env: { ...process.env, GIT_AUTHOR_NAME: 't', GIT_AUTHOR_EMAIL: 't@x', GIT_COMMITTER_NAME: 't', GIT_COMMITTER_EMAIL: 't@x' },
    })
  git('init', '-q')
  git('add', '.')
  git('commit', '-qm', 'buggy')
  const commit = execFileSync('git', ['rev-parse', 'HEAD'], { cwd: repo, encoding: 'utf8' }).trim()
  // A later commit holds the fix: the agent must never see it (the workspace is an archive of `commit`).
  writeFileSync(join(repo, 'calc.js'), 'export const add = (a, b) => a + b\nexport const mul = (a, b) => a * b\n')
  git('commit', '-qam', `the fix ${SOLUTION_MARK}`)
  const suite = join(dir, 'suite')
  const task = (name: string, statement: string, assertion: string) => {
    mkdirSync(join(suite, name, 'tests'), { recursive: true })
    writeFileSync(join(suite, name, 'task.yaml'), `statement: ${JSON.stringify(statement)}\nrepo: ../../repo\ncommit: ${commit}\ncheck: node check.mjs\n`)
    writeFileSync(
      join(suite, name, 'tests', 'check.mjs'),
      `// ${HIDDEN_MARK}\nimport * as c from './calc.js'\nif (!(${assertion})) { console.log('wrong'); process.exit(1) }\n`,
    )
  }
  task('add', 'TASK-ADD: add() subtracts; make it add.', 'c.add(2, 3) === 5')
  task('mul', 'TASK-MUL: mul() adds; make it multiply.', 'c.mul(2, 3) === 6')
  task('already', 'TASK-ALREADY: nothing to do.', 'typeof c.add === "function"')
  writeFileSync(
    join(suite, 'add', 'solution.patch'),
    `# ${SOLUTION_MARK}\n--- a/calc.js\n+++ b/calc.js\n@@ -1,2 +1,2 @@\n-export const add = (a, b) => a - b\n+export const add = (a, b) => a + b\n export const mul = (a, b) => a + b\n`,
  )
  return { dir, suite }
}

const USAGE = { prompt_tokens: 1000, completion_tokens: 100, total_tokens: 1100 }

/** `good` fixes add and mul; `meh` fixes add only. Each reply costs 1000 prompt + 100 completion tokens. */
function script(req: RecordedRequest): Reply {
  const text = req.body.messages.map((m) => (typeof m.content === 'string' ? m.content : JSON.stringify(m.content))).join('\n')
  const turn = req.body.messages.filter((m) => m.role === 'assistant').length
  const task = text.includes('TASK-ADD') ? 'add' : text.includes('TASK-MUL') ? 'mul' : 'other'
  const fixes = req.body.model === 'good-model' || task === 'add'
  const fixed = task === 'add' ? BUGGY.replace('a - b', 'a + b') : BUGGY.replace('a + b\n', 'a * b\n')
  if (!req.body.tools) return { content: '## Original Task\nsummary', usage: USAGE }
  if (turn === 0) return { calls: [{ name: 'read_file', arguments: { path: 'calc.js' } }], usage: USAGE }
  if (turn === 1 && fixes && task !== 'other') return { calls: [{ name: 'write_file', arguments: { path: 'calc.js', content: fixed } }], usage: USAGE }
  return { calls: [{ name: 'finish', arguments: { summary: 'done' } }], usage: USAGE }
}

function setup(fake: FakeLlm): { home: string; config: string; work: string } {
  const home = mkdtempSync(join(tmpdir(), 'ctxagent-eval-home-'))
  const work = mkdtempSync(join(tmpdir(), 'ctxagent-eval-work-'))
  onTestFinished(() => {
    rmSync(home, { recursive: true, force: true })
    rmSync(work, { recursive: true, force: true })
  })
  fake.fallback = script
  const config = join(home, 'config.yaml')
  writeFileSync(config, fake.configYaml('pricing:\n  good-model: { prompt: 1, completion: 2 }\n  meh-model: { prompt: 1, completion: 2 }\n'))
  return { home, config, work }
}

interface Report {
  variants: {
    name: string
    pass_at_1: number
    usd_per_task: number
    usd_per_solved: number | null
    trials: { task: string; passed: boolean; usd: number; status: string; uuid: string }[]
  }[]
  paired: { a: string; b: string; pass_diff: number; ci95: [number, number] }[]
  dir: string
}

describe('ctxagent eval', () => {
  it('check leaves out a task whose check passes at the start, and keeps those that fail there and pass with their solution', async () => {
    const { suite } = makeSuite()
    const fake = await startFakeLlm()
    const { home, config } = setup(fake)
    const res = await cliAsync(['--home', home, '--config', config, '--json', 'eval', 'check', suite])
    expect(res.code).toBe(1)
    const doc = JSON.parse(res.stdout) as { tasks: { task: string; ok: boolean; why?: string; solution?: boolean }[] }
    expect(doc.tasks).toEqual([
      { task: 'add', ok: true, solution: true },
      { task: 'already', ok: false, why: 'its check passes on the starting tree: it measures nothing' },
      { task: 'mul', ok: true, solution: false },
    ])
  })

  it('the demo suite that ships is usable: each check fails at the start and passes with its solution', async () => {
    const home = mkdtempSync(join(tmpdir(), 'ctxagent-eval-home-'))
    onTestFinished(() => rmSync(home, { recursive: true, force: true }))
    const res = await cliAsync(['--home', home, '--json', 'eval', 'check', join(ROOT, 'demo', 'eval', 'suite')])
    expect(res.code).toBe(0)
    const doc = JSON.parse(res.stdout) as { tasks: { task: string; ok: boolean }[] }
    expect(doc.tasks.map((t) => [t.task, t.ok])).toEqual([
      ['discount-vat', true],
      ['round-half', true],
      ['swiss-rate', true],
    ])
  })

  it('runs each task with each variant, judges it by its hidden check, and reports pass@1, $ per solved and the paired difference; no request holds a hidden file', async () => {
    const { suite } = makeSuite()
    rmSync(join(suite, 'already'), { recursive: true })
    const fake = await startFakeLlm()
    const { home, config, work } = setup(fake)
    const args = [
      '--home',
      home,
      '--config',
      config,
      '--json',
      'eval',
      'run',
      suite,
      '--variant',
      'meh=model=meh-model',
      '--variant',
      'good=model=good-model',
      '--work-dir',
      work,
    ]
    const res = await cliAsync(args)
    expect(res.stderr).not.toMatch(/ctxagent: (?!warning)/)
    expect(res.code).toBe(0)
    const report = JSON.parse(res.stdout) as Report
    const [meh, good] = report.variants
    expect(meh?.pass_at_1).toBe(0.5)
    expect(good?.pass_at_1).toBe(1)
    expect(good?.trials.map((t) => [t.task, t.passed, t.status])).toEqual([
      ['add', true, 'completed'],
      ['mul', true, 'completed'],
    ])
    // Every request costs 1000 × $1 + 100 × $2 per million tokens: a trial's money is its requests' count × $0.0012.
    for (const variant of report.variants)
      for (const t of variant.trials) {
        const statement = t.task === 'add' ? 'TASK-ADD' : 'TASK-MUL'
        const requests = fake.requests.filter((r) => r.body.model === `${variant.name}-model` && r.raw.includes(statement))
        expect(requests.length).toBeGreaterThan(0)
        expect(t.usd).toBeCloseTo(requests.length * 0.0012, 9)
      }
    const mehUsd = (meh?.trials ?? []).reduce((a, t) => a + t.usd, 0)
    expect(meh?.usd_per_solved).toBeCloseTo(mehUsd / 1, 9)
    expect(meh?.usd_per_task).toBeCloseTo(mehUsd / 2, 9)
    expect(report.paired).toHaveLength(1)
    expect(report.paired[0]).toMatchObject({ a: 'good', b: 'meh', pass_diff: 0.5 })
    const [low, high] = report.paired[0]?.ci95 ?? [1, 0]
    expect(low).toBeLessThanOrEqual(0.5)
    expect(high).toBeGreaterThanOrEqual(0.5)
    // The hidden check and the solution reached no request, byte for byte.
    expect(fake.requests.length).toBeGreaterThan(0)
    for (const r of fake.requests) {
      expect(r.raw.includes(HIDDEN_MARK)).toBe(false)
      expect(r.raw.includes(SOLUTION_MARK)).toBe(false)
    }
    // The trials are ordinary tasks in the tree.
    expect(readdirSync(join(home, 'completed'))).toHaveLength(4)
  })

  it('a killed eval resumes where it stopped: finished trials are kept, never run again', async () => {
    const { suite } = makeSuite()
    rmSync(join(suite, 'already'), { recursive: true })
    const fake = await startFakeLlm()
    const { home, config, work } = setup(fake)
    const args = ['--home', home, '--config', config, '--json', 'eval', 'run', suite, '--variant', 'good=model=good-model', '--work-dir', work]
    const child = spawn(process.execPath, [BIN, ...args], { env: { ...process.env, ...TEST_ENV }, stdio: 'ignore' })
    const evals = join(home, 'evals')
    const trialsFile = () => {
      const id = existsSync(evals) ? readdirSync(evals).find((n) => /^[0-9a-f]{12}$/.test(n)) : undefined
      return id === undefined ? null : join(evals, id, 'trials.jsonl')
    }
    const recorded = () => {
      const file = trialsFile()
      return file !== null && existsSync(file) ? readFileSync(file, 'utf8').split('\n').filter(Boolean) : []
    }
    await until('the first trial recorded', () => recorded().length >= 1, 2400)
    child.kill('SIGKILL')
    await new Promise((resolve) => child.once('exit', resolve))
    const first = JSON.parse(recorded()[0] as string) as { task: string; uuid: string }
    const res = await cliAsync(args)
    expect(res.code).toBe(0)
    const lines = recorded().map((l) => JSON.parse(l) as { task: string; uuid: string })
    expect(lines.map((l) => l.task).sort()).toEqual(['add', 'mul'])
    expect(lines.find((l) => l.task === first.task)?.uuid).toBe(first.uuid)
  })
})
