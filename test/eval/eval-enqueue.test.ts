import { spawn } from 'node:child_process'
import { pidsHolding } from '../helpers/processes.js'
import { chmodSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, expect, it, onTestFinished } from 'vitest'
import { startFakeLlm } from '../helpers/fake-llm.js'
import type { FakeLlm } from '../helpers/fake-llm.js'
import { startServe } from '../serve/helpers.js'
import { started, stopCleanly } from '../helpers/fleet-worker.js'
import { BIN, cliAsync, ROOT, TEST_ENV } from '../helpers/run.js'
import { usePostgres } from '../helpers/use-postgres.js'
import { exitOf, until } from '../helpers/wait.js'
import { blockCheck, HIDDEN_MARK, makeSuite, script, setup, SOLUTION_MARK } from './scripted-suite.js'
import type { Report } from './scripted-suite.js'

const database = usePostgres({ truncate: ['fleet_jobs', 'fleet_workers', 'tasks'] })

/** What two reports of the same scripted answers share: every figure and every trial's verdict, money and ending (not uuids, times or paths). */
function figures(report: Report) {
  return {
    variants: report.variants.map((v) => ({
      name: v.name,
      pass_at_1: v.pass_at_1,
      usd_per_task: v.usd_per_task,
      usd_per_solved: v.usd_per_solved,
      trials: v.trials.map((t) => ({ task: t.task, passed: t.passed, usd: t.usd, status: t.status })).sort((a, b) => a.task.localeCompare(b.task)),
    })),
    paired: report.paired,
  }
}

/** A worker on the test's database, with the tree and config given. */
function startWorker(home: string, config: string) {
  const child = spawn(process.execPath, [BIN, '--home', home, '--config', config, 'worker', '--concurrency', '2'], {
    cwd: ROOT,
    env: { ...process.env, ...TEST_ENV, ...database.env() },
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  let err = ''
  child.stderr.on('data', (d: Buffer) => (err += d.toString()))
  child.stdout.resume()
  onTestFinished(() => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL')
  })
  return { child, err: () => err }
}

/** The agent's second request (its first after a tool call) answered only once `release` is called. */
function holdSecondRequest(fake: FakeLlm): { held: () => boolean; release: () => void } {
  let held = false
  let release = (): void => undefined
  const gate = new Promise<void>((resolve) => (release = resolve))
  onTestFinished(() => release())
  fake.fallback = (req) => {
    const reply = script(req)
    const turn = req.body.messages.filter((m) => m.role === 'assistant').length
    if (req.body.tools === undefined || turn !== 1 || held) return reply
    held = true
    return { ...reply, after: gate }
  }
  return { held: () => held, release: () => release() }
}

describe('ctxagent eval run --enqueue', () => {
  it("runs each trial as a fleet job, judged on the worker's host; the report equals a local eval's; a second command queues nothing; no request holds a hidden file", async () => {
    const { suite } = makeSuite()
    rmSync(join(suite, 'already'), { recursive: true })
    const fake = await startFakeLlm()
    const { home, config, work } = setup(fake)
    const variants = ['--variant', 'meh=model=meh-model', '--variant', 'good=model=good-model']
    const local = await cliAsync(['--home', home, '--config', config, '--json', 'eval', 'run', suite, ...variants, '--work-dir', work])
    expect(local.code, local.stderr).toBe(0)

    // The fleet's tree, apart from the local eval's, and where its workers make the trials' workspaces.
    const fleetHome = mkdtempSync(join(tmpdir(), 'ctxagent-eval-fleet-'))
    const workspaces = mkdtempSync(join(tmpdir(), 'ctxagent-eval-ws-'))
    chmodSync(workspaces, 0o711)
    onTestFinished(() => {
      rmSync(fleetHome, { recursive: true, force: true })
      rmSync(workspaces, { recursive: true, force: true })
    })
    const fleetConfig = join(fleetHome, 'config.yaml')
    writeFileSync(fleetConfig, `${readFileSync(config, 'utf8')}\nfleet:\n  workspaces_dir: ${JSON.stringify(workspaces)}\n`)
    const before = fake.requests.length
    const worker = await started(startWorker(fleetHome, fleetConfig))
    const args = ['--home', fleetHome, '--config', fleetConfig, '--json', 'eval', 'run', suite, ...variants, '--enqueue']
    const queued = await cliAsync(args, database.env())
    expect(queued.code, queued.stderr).toBe(0)
    expect(queued.stderr).toContain('4 trial(s) queued as fleet jobs')
    expect(figures(JSON.parse(queued.stdout) as Report)).toEqual(figures(JSON.parse(local.stdout) as Report))
    const jobs = await database.query<{ state: string; spec: { eval?: unknown } }>('SELECT state, spec FROM fleet_jobs ORDER BY id')
    expect(jobs.map((j) => j.state)).toEqual(['done', 'done', 'done', 'done'])
    expect(jobs.every((j) => j.spec.eval !== undefined)).toBe(true)
    expect(fake.requests.length).toBeGreaterThan(before)

    // The same command again: nothing queued, nothing run, the same report.
    const asked = fake.requests.length
    const again = await cliAsync(args, database.env())
    expect(again.code, again.stderr).toBe(0)
    expect(again.stderr).not.toContain('queued as fleet jobs')
    expect(figures(JSON.parse(again.stdout) as Report)).toEqual(figures(JSON.parse(local.stdout) as Report))
    expect((await database.query('SELECT id FROM fleet_jobs')).length).toBe(4)
    expect(fake.requests.length).toBe(asked)
    // The trials are the fleet tree's ordinary tasks, each run by the worker as its job's task.
    expect(readdirSync(join(fleetHome, 'completed'))).toHaveLength(4)
    await stopCleanly(worker)

    // The hidden check and the solution reached no request, byte for byte (the local eval's and the fleet's).
    for (const r of fake.requests) {
      expect(r.raw.includes(HIDDEN_MARK)).toBe(false)
      expect(r.raw.includes(SOLUTION_MARK)).toBe(false)
    }
    // Eight trials one after another's processes (a local eval, then the fleet's) on a busy machine: a give-up point of its own.
  }, 300_000)

  it('--no-wait returns once the trials are queued; a trial whose job was cancelled shows it; a later command collects the rest', async () => {
    const { suite } = makeSuite()
    rmSync(join(suite, 'already'), { recursive: true })
    const fake = await startFakeLlm()
    const { home, config } = setup(fake)
    const args = ['--home', home, '--config', config, '--json', 'eval', 'run', suite, '--variant', 'good=model=good-model', '--enqueue']
    const queued = await cliAsync([...args, '--no-wait'], database.env())
    expect(queued.code, queued.stderr).toBe(0)
    expect(JSON.parse(queued.stdout)).toMatchObject({ remaining: 2 })
    const rows = await database.query<{ id: string; spec: { eval: { task: string } } }>('SELECT id, spec FROM fleet_jobs ORDER BY id')
    const mul = rows.find((r) => r.spec.eval.task === 'mul')
    const cancel = await cliAsync(['--home', home, '--config', config, 'jobs', 'cancel', String(mul?.id)], database.env())
    expect(cancel.code, cancel.stderr).toBe(0)
    const worker = await started(startWorker(home, config))
    const collected = await cliAsync(args, database.env())
    expect(collected.code, collected.stderr).toBe(0)
    const report = JSON.parse(collected.stdout) as Report & { remaining: number }
    expect(report.remaining).toBe(0)
    expect(report.variants[0]?.trials.map((t) => [t.task, t.passed, t.status]).sort()).toEqual([
      ['add', true, 'completed'],
      ['mul', false, 'job_cancelled'],
    ])
    // A cancelled trial is no verdict on the variant: pass@1 is over the judged trials.
    expect(report.variants[0]?.pass_at_1).toBe(1)
    expect((await database.query('SELECT id FROM fleet_jobs')).length).toBe(2)
    await stopCleanly(worker)
    // The page reads the same jobs: the cancelled trial shows as the command shows it, with no verdict.
    const id = readdirSync(join(home, 'evals'))[0] as string
    const page = await startServe(home, { config, env: database.env() })
    expect(await (await page.get(`/api/evals/${id}`)).json()).toEqual(JSON.parse(collected.stdout))
    const html = await (await page.get(`/evals/${id}`)).text()
    expect(html).toMatch(/<td data-label="check"><span class="status s-paused" title="[^"]*">no verdict<\/span><\/td><td data-label="ended">job_cancelled</)
    expect(await (await page.get('/api/evals')).json()).toEqual([JSON.parse(collected.stdout)])
  }, 180_000)

  it("a worker stopped mid-trial queues its task's resume; the next worker resumes it and judges it only then", async () => {
    const { suite } = makeSuite()
    rmSync(join(suite, 'already'), { recursive: true })
    rmSync(join(suite, 'mul'), { recursive: true })
    const fake = await startFakeLlm()
    const { home, config } = setup(fake)
    // The agent's second request is held until the test lets it go: the worker is stopped while it waits.
    const hold = holdSecondRequest(fake)
    const args = ['--home', home, '--config', config, '--json', 'eval', 'run', suite, '--variant', 'good=model=good-model', '--enqueue']
    expect((await cliAsync([...args, '--no-wait'], database.env())).code).toBe(0)
    const first = await started(startWorker(home, config))
    await until('the held request', () => hold.held(), 2400)
    await stopCleanly(first)
    hold.release()
    const jobs = await database.query<{ kind: string; state: string; task_uuid: string }>('SELECT kind, state, task_uuid FROM fleet_jobs ORDER BY id')
    expect(jobs.map((j) => [j.kind, j.state])).toEqual([
      ['new', 'done'],
      ['resume', 'waiting'],
    ])
    // Paused, the trial has no verdict yet: nothing recorded.
    const id = readdirSync(join(home, 'evals'))[0] as string
    expect(readFileSync(join(home, 'evals', id, 'trials.jsonl'), 'utf8')).toBe('')
    const second = await started(startWorker(home, config))
    const res = await cliAsync(args, database.env())
    expect(res.code, res.stderr).toBe(0)
    const report = JSON.parse(res.stdout) as Report
    expect(report.variants[0]?.trials.map((t) => [t.task, t.passed, t.status, t.uuid])).toEqual([['add', true, 'completed', jobs[0]?.task_uuid]])
    expect(report.variants[0]?.pass_at_1).toBe(1)
    await stopCleanly(second)
    for (const r of fake.requests) expect(r.raw.includes(HIDDEN_MARK)).toBe(false)
  }, 180_000)

  it('a trial whose job ended without a verdict (its task paused by an operator) is no_verdict; jobs retry runs it again and the same command collects its verdict', async () => {
    const { suite } = makeSuite()
    rmSync(join(suite, 'already'), { recursive: true })
    rmSync(join(suite, 'mul'), { recursive: true })
    const fake = await startFakeLlm()
    const { home, config } = setup(fake)
    // The agent's second request is held until the operator's pause has been asked for.
    const hold = holdSecondRequest(fake)
    const args = ['--home', home, '--config', config, '--json', 'eval', 'run', suite, '--variant', 'good=model=good-model', '--enqueue']
    expect((await cliAsync([...args, '--no-wait'], database.env())).code).toBe(0)
    const worker = await started(startWorker(home, config))
    await until('the held request', () => hold.held(), 2400)
    const [job] = await database.query<{ id: string; task_uuid: string }>('SELECT id, task_uuid FROM fleet_jobs')
    const paused = cliAsync(['--home', home, '--config', config, 'pause', job?.task_uuid as string], database.env())
    // Let go once the pause is asked for: the agent then pauses rather than finish.
    const inbox = join(home, 'running', job?.task_uuid as string, 'inbox.jsonl')
    await until('the pause asked for', () => existsSync(inbox) && readFileSync(inbox, 'utf8').includes('"control"'), 2400)
    hold.release()
    const pausedRes = await paused
    expect(pausedRes.code, pausedRes.stderr).toBe(0)
    await until('the job done', async () => (await database.query<{ state: string }>('SELECT state FROM fleet_jobs'))[0]?.state === 'done')
    const unjudged = await cliAsync(args, database.env())
    expect(unjudged.code, unjudged.stderr).toBe(0)
    expect((JSON.parse(unjudged.stdout) as Report).variants[0]?.trials.map((t) => [t.task, t.passed, t.status])).toEqual([['add', false, 'no_verdict']])
    // A done job that is no trial's, or whose trial has its verdict, is still not run again (below); this one is.
    const retried = await cliAsync(['--home', home, '--config', config, 'jobs', 'retry', String(job?.id)], database.env())
    expect(retried.code, retried.stderr).toBe(0)
    const collected = await cliAsync(args, database.env())
    expect(collected.code, collected.stderr).toBe(0)
    const trials = (JSON.parse(collected.stdout) as Report).variants[0]?.trials ?? []
    expect(trials.map((t) => [t.task, t.passed, t.status, t.uuid])).toEqual([['add', true, 'completed', job?.task_uuid]])
    const again = await cliAsync(['--home', home, '--config', config, 'jobs', 'retry', String(job?.id)], database.env())
    expect(again.code).toBe(4)
    expect(again.stderr).toMatch(/job \d+ is done and its eval trial has its verdict; only a trial without one is run again/)
    await stopCleanly(worker)
  }, 180_000)

  it('refuses --enqueue without a fleet database, and with --concurrency, in one line, exit 2, nothing written', async () => {
    const { suite } = makeSuite()
    const fake = await startFakeLlm()
    const { home, config } = setup(fake)
    const base = ['--home', home, '--config', config, 'eval', 'run', suite, '--variant', 'good=model=good-model', '--enqueue']
    const none = await cliAsync(base, { CTXAGENT_DATABASE_URL: '' })
    expect(none.code).toBe(2)
    expect(none.stderr.trim().split('\n')).toHaveLength(1)
    expect(none.stderr).toMatch(/^ctxagent: eval run --enqueue needs the fleet's PostgreSQL database \(/)
    const both = await cliAsync([...base, '--concurrency', '2'], database.env())
    expect(both.code).toBe(2)
    expect(both.stderr.trim().split('\n')).toHaveLength(1)
    expect(both.stderr).toMatch(/^ctxagent: --enqueue and --concurrency do not go together \(/)
    expect(readdirSync(home).includes('evals')).toBe(false)
  })

  it("a worker's stop during a trial's hidden check ends it at once with no verdict; the job's resume judges the task without running its agent", async () => {
    const { suite } = makeSuite()
    rmSync(join(suite, 'already'), { recursive: true })
    rmSync(join(suite, 'mul'), { recursive: true })
    const { barrier, marker } = blockCheck(suite, 'add')
    const fake = await startFakeLlm()
    const { home, config } = setup(fake)
    const workspaces = mkdtempSync(join(tmpdir(), 'ctxagent-eval-ws-'))
    chmodSync(workspaces, 0o711)
    onTestFinished(() => rmSync(workspaces, { recursive: true, force: true }))
    writeFileSync(config, `${readFileSync(config, 'utf8')}tools:\n  sandbox_read_only: [${barrier}]\nfleet:\n  workspaces_dir: ${JSON.stringify(workspaces)}\n`)
    const args = ['--home', home, '--config', config, '--json', 'eval', 'run', suite, '--variant', 'good=model=good-model', '--enqueue']
    expect((await cliAsync([...args, '--no-wait'], database.env())).code).toBe(0)
    const worker = await started(startWorker(home, config))
    await until("the check's sleep running", () => pidsHolding(`sleep ${marker}`).length > 0, 4000)
    const asked = fake.requests.length
    worker.child.kill('SIGTERM')
    expect((await exitOf(worker.child)).code, worker.err()).toBe(0)
    expect(pidsHolding(`sleep ${marker}`)).toEqual([])
    const id = readdirSync(join(home, 'evals')).find((n) => /^[0-9a-f]{12}$/.test(n)) as string
    expect(readFileSync(join(home, 'evals', id, 'trials.jsonl'), 'utf8')).toBe('')
    // The stopped job handed back: its resume waits for a worker.
    const jobs = await database.query<{ kind: string; state: string }>('SELECT kind, state FROM fleet_jobs ORDER BY id')
    expect(jobs).toEqual([
      { kind: 'new', state: 'done' },
      { kind: 'resume', state: 'waiting' },
    ])

    writeFileSync(join(barrier, 'go'), '')
    const again = await started(startWorker(home, config))
    const collected = await cliAsync(args, database.env())
    expect(collected.code, collected.stderr).toBe(0)
    expect(fake.requests).toHaveLength(asked)
    const trials = (JSON.parse(collected.stdout) as Report).variants[0]?.trials ?? []
    expect(trials.map((t) => [t.task, t.passed, t.status])).toEqual([['add', true, 'completed']])
    again.child.kill('SIGTERM')
    await exitOf(again.child)
  })
})
