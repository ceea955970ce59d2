import { spawn } from 'node:child_process'
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, expect, it, onTestFinished } from 'vitest'
import { startFakeLlm } from '../helpers/fake-llm.js'
import { BIN, cliAsync, ROOT, TEST_ENV } from '../helpers/run.js'
import { until } from '../helpers/wait.js'
import { HIDDEN_MARK, makeSuite, setup, SOLUTION_MARK } from './scripted-suite.js'
import type { Report } from './scripted-suite.js'

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
