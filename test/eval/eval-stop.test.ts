import { spawn } from 'node:child_process'
import { pidsHolding } from '../helpers/processes.js'
import { existsSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it, onTestFinished } from 'vitest'
import { startFakeLlm } from '../helpers/fake-llm.js'
import { BIN, cliAsync, TEST_ENV } from '../helpers/run.js'
import { exitOf, sleep, until } from '../helpers/wait.js'
import { blockCheck, makeSuite, setup } from './scripted-suite.js'
import type { Report } from './scripted-suite.js'

/*
 * A stop during a trial's hidden check (docs/eval.md#a-stop): SIGTERM to a real `eval run`
 * whose check waits on a barrier ends the check's sandbox at once (no process left), exits
 * 143 and records no verdict; the same command again judges the trial without running its
 * agent again (no new LLM request).
 */

describe('a stop during an eval’s hidden check', () => {
  it('ends the check at once, leaves no process, records no verdict; the same command judges it without running the agent again', {
    timeout: 240_000,
  }, async () => {
    const { suite } = makeSuite()
    rmSync(join(suite, 'already'), { recursive: true })
    rmSync(join(suite, 'mul'), { recursive: true })
    const { barrier, marker } = blockCheck(suite, 'add')
    const fake = await startFakeLlm()
    const { home, config, work } = setup(fake)
    writeFileSync(config, fake.configYaml(`pricing:\n  good-model: { prompt: 1, completion: 2 }\ntools:\n  sandbox_read_only: [${barrier}]\n`))
    const args = ['--home', home, '--config', config, '--json', 'eval', 'run', suite, '--variant', 'good=model=good-model', '--work-dir', work]
    const child = spawn(process.execPath, [BIN, ...args], { env: { ...process.env, ...TEST_ENV }, stdio: ['ignore', 'ignore', 'pipe'] })
    let err = ''
    child.stderr.setEncoding('utf8').on('data', (d: string) => (err += d))
    const exited = exitOf(child)
    onTestFinished(() => {
      if (child.exitCode === null) child.kill('SIGKILL')
    })
    await until("the check's sleep running", () => pidsHolding(`sleep ${marker}`).length > 0, 4000)
    const asked = fake.requests.length
    expect(asked).toBeGreaterThan(0)
    child.kill('SIGTERM')
    // An eval that does not end is a failure of its own, said at once, not the test's timeout.
    const ended = await Promise.race([exited, sleep(120_000).then(() => null)])
    expect(ended, `eval run did not end on SIGTERM\n${err}`).not.toBeNull()
    expect(ended?.code, err).toBe(143)
    expect(pidsHolding(`sleep ${marker}`)).toEqual([])
    const id = readdirSync(join(home, 'evals')).find((n) => /^[0-9a-f]{12}$/.test(n)) as string
    expect(readFileSync(join(home, 'evals', id, 'trials.jsonl'), 'utf8')).toBe('')
    // The agent had ended: its task is done, waiting only for its verdict.
    expect(readdirSync(join(home, 'completed'))).toHaveLength(1)
    expect(existsSync(join(home, 'evals', id, 'ended.jsonl'))).toBe(true)

    writeFileSync(join(barrier, 'go'), '')
    const res = await cliAsync(args)
    expect(res.code, res.stderr).toBe(0)
    expect(fake.requests).toHaveLength(asked)
    const report = JSON.parse(res.stdout) as Report
    const trials = report.variants[0]?.trials ?? []
    expect(trials.map((t) => [t.task, t.passed, t.status])).toEqual([['add', true, 'completed']])
    expect(readdirSync(join(home, 'completed'))).toEqual([trials[0]?.uuid])
  })

  it('eval check stopped during a check reports no verdict for that task, leaves no process and exits 130 on SIGINT', { timeout: 240_000 }, async () => {
    const { suite } = makeSuite()
    const marker = `${5000 + Math.floor(Math.random() * 1000)}.${process.pid}`
    // The first task checked ('add') sleeps until killed; its sleep's argument marks it among the host's processes.
    const yaml = join(suite, 'add', 'task.yaml')
    writeFileSync(yaml, readFileSync(yaml, 'utf8').replace('check: node check.mjs', `check: ${JSON.stringify(`sleep ${marker}`)}`))
    const fake = await startFakeLlm()
    const { home, config } = setup(fake)
    const child = spawn(process.execPath, [BIN, '--home', home, '--config', config, '--json', 'eval', 'check', suite], {
      env: { ...process.env, ...TEST_ENV },
      stdio: ['ignore', 'pipe', 'pipe'],
    })
    let out = ''
    let err = ''
    child.stdout.setEncoding('utf8').on('data', (d: string) => (out += d))
    child.stderr.setEncoding('utf8').on('data', (d: string) => (err += d))
    const exited = exitOf(child)
    onTestFinished(() => {
      for (const pid of pidsHolding(`sleep ${marker}`)) process.kill(pid, 'SIGKILL')
      if (child.exitCode === null) child.kill('SIGKILL')
    })
    await until("the check's sleep running", () => pidsHolding(`sleep ${marker}`).length > 0, 4000)
    child.kill('SIGINT')
    const ended = await Promise.race([exited, sleep(120_000).then(() => null)])
    expect(ended, `eval check did not end on SIGINT\n${err}`).not.toBeNull()
    expect(ended?.code, err).toBe(130)
    expect(pidsHolding(`sleep ${marker}`)).toEqual([])
    expect(out).toBe('')
    expect(err).toContain('no verdict')
  })
})
