import { execFileSync } from 'node:child_process'
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, expect, it, onTestFinished } from 'vitest'
import { exitOf, until } from '../helpers/wait.js'
import { enqueue, holdAt, startWorker } from '../helpers/fleet-worker.js'
import { usePostgres } from '../helpers/use-postgres.js'
import { readTask, runSetup } from '../run/harness.js'
import type { RunSetup, Started } from '../run/harness.js'

/** Each moment here starts processes in turn: a give-up point of 120 s, not the 60 s default. */
const untilLong = <T>(what: string, probe: () => Promise<T | null | undefined | false> | T | null | undefined | false): Promise<T> => until(what, probe, 2400)

const database = usePostgres({ truncate: ['fleet_jobs', 'fleet_workers', 'tasks'] })
const query = database.query
const db = database.env

/**
 * Issue 36: `jobs cancel` at each moment of a job's start (docs/fleet.md#cancelling-a-job).
 * Each moment is held by the test (a hold point of the worker or its agent, or a git that
 * waits), the job cancelled there, then let go: the job ends cancelled, no LLM request is
 * sent, and the task is not completed.
 */

/** A job queued (fleet-worker.ts's enqueue), with its id. */
async function queued(s: RunSetup, args: string[]): Promise<{ uuid: string; id: number }> {
  const uuid = await enqueue(s, database, args)
  const row = (await query<{ id: string }>('SELECT id FROM fleet_jobs WHERE task_uuid = $1', [uuid]))[0]
  return { uuid, id: Number(row?.id) }
}

const job = async (id: number) =>
  (await query<{ state: string; outcome: string | null; error: string | null }>('SELECT state, outcome, error FROM fleet_jobs WHERE id = $1', [id]))[0]

/** A bare repository to clone, and a fleet.workspaces_dir for the clones. */
function bareRepo(): { repo: string; workspaces: string } {
  const root = mkdtempSync(join(tmpdir(), 'ctxagent-cancel-'))
  onTestFinished(() => rmSync(root, { recursive: true, force: true }))
  const src = join(root, 'src')
  mkdirSync(src)
  const git = (args: string[], cwd = root) =>
    execFileSync('git', args, {
      cwd,
      env: { ...process.env, GIT_AUTHOR_NAME: 't', GIT_AUTHOR_EMAIL: 't@t', GIT_COMMITTER_NAME: 't', GIT_COMMITTER_EMAIL: 't@t' },
    })
  git(['init', '--quiet', '-b', 'main'], src)
  writeFileSync(join(src, 'calc.js'), 'v1\n')
  git(['add', '.'], src)
  git(['commit', '--quiet', '-m', 'v1'], src)
  git(['clone', '--quiet', '--bare', src, join(root, 'calc.git')])
  return { repo: join(root, 'calc.git'), workspaces: join(root, 'workspaces') }
}

async function stopWorker(worker: Started): Promise<void> {
  worker.child.kill('SIGTERM')
  expect((await exitOf(worker.child)).code).toBe(0)
}

describe('jobs cancel at each moment of a job start', () => {
  it('claimed, before its clone: the job ends cancelled, nothing cloned, no task, no LLM request', { timeout: 180_000 }, async () => {
    const { repo, workspaces } = bareRepo()
    const s = await runSetup(`fleet:\n  workspaces_dir: ${workspaces}\n`)
    const hold = holdAt('worker:claimed')
    const worker = startWorker(s, database.server.url, [], hold.env)
    const { uuid, id } = await queued(s, ['--task', 'read calc.js', '--repo', repo])
    await untilLong('the job claimed', hold.reached)
    // The worker is held: the cancel cannot see it end the job, so it waits 1 s, not the default 2 min.
    const cancelled = await s.run(['jobs', 'cancel', String(id), '--wait', '1s'], db())
    expect(cancelled.code, cancelled.stderr).toBe(0)
    expect(cancelled.stdout).toContain('not started yet: its worker does not start it')
    hold.release()
    await untilLong('the job cancelled', async () => (await job(id))?.state === 'cancelled')
    expect(await job(id)).toEqual({ state: 'cancelled', outcome: 'cancelled', error: 'cancelled before its agent started' })
    expect(existsSync(join(workspaces, uuid))).toBe(false)
    expect(() => readTask(s.tree, uuid)).toThrow(/nowhere/)
    expect(s.fake.requests).toHaveLength(0)
    await stopWorker(worker)
  })

  it('cloning: the clone is stopped, the agent never starts; the job ends cancelled, no LLM request', { timeout: 180_000 }, async () => {
    const { repo, workspaces } = bareRepo()
    const s = await runSetup(`fleet:\n  workspaces_dir: ${workspaces}\n`)
    // A git that waits, at `clone`, until the test removes its gate.
    const bin = mkdtempSync(join(tmpdir(), 'ctxagent-git-'))
    onTestFinished(() => rmSync(bin, { recursive: true, force: true }))
    const gate = join(bin, 'gate')
    writeFileSync(gate, '')
    const realGit = execFileSync('sh', ['-c', 'command -v git']).toString().trim()
    writeFileSync(
      join(bin, 'git'),
      `#!/bin/sh\ncase " $* " in *" clone "*) touch "${gate}.reached"; while [ -e "${gate}" ]; do sleep 0.05; done;; esac\nexec "${realGit}" "$@"\n`,
    )
    chmodSync(join(bin, 'git'), 0o755)
    const worker = startWorker(s, database.server.url, [], { PATH: `${bin}:${process.env.PATH ?? ''}` })
    const { uuid, id } = await queued(s, ['--task', 'read calc.js', '--repo', repo])
    await untilLong('the clone under way', () => existsSync(`${gate}.reached`))
    const cancelled = await s.run(['jobs', 'cancel', String(id), '--json'], db())
    expect(cancelled.code, cancelled.stderr).toBe(0)
    expect(JSON.parse(cancelled.stdout)).toEqual({ job: id, task_uuid: uuid, state: 'cancelled', task: 'not_started' })
    // The gate stays shut: the worker stops the clone itself (a large repository takes minutes).
    await untilLong('the job cancelled', async () => (await job(id))?.state === 'cancelled')
    expect(await job(id)).toEqual({ state: 'cancelled', outcome: 'cancelled', error: 'cancelled before its agent started' })
    expect(worker.err()).toContain(`job ${id}: cancelled during its clone; the clone is stopped`)
    // Nothing of the clone is left, and no task was made.
    expect(existsSync(workspaces) ? readdirSync(workspaces) : []).toEqual([])
    expect(() => readTask(s.tree, uuid)).toThrow(/nowhere/)
    rmSync(gate)
    expect(s.fake.requests).toHaveLength(0)
    await stopWorker(worker)
  })

  it('agent starting, its task not taken yet: the worker passes the cancel on; the task pauses before its first LLM request', {
    timeout: 180_000,
  }, async () => {
    const s = await runSetup()
    s.fake.fallback = () => ({ calls: [{ name: 'finish', arguments: { summary: 'done', status: 'done' } }] })
    const hold = holdAt('run:before-take')
    const worker = startWorker(s, database.server.url, [], hold.env)
    const { uuid, id } = await queued(s, ['--task', 'look around', '--workspace', s.ws])
    await untilLong('the agent started', hold.reached)
    // The worker is held: the cancel cannot see it end the job, so it waits 1 s, not the default 2 min.
    const cancelled = await s.run(['jobs', 'cancel', String(id), '--wait', '1s'], db())
    expect(cancelled.code, cancelled.stderr).toBe(0)
    expect(cancelled.stdout).toContain('not started yet')
    await untilLong('the worker to pass the cancel on', () => worker.err().includes(`job ${id}: cancelled as its agent starts`))
    hold.release()
    await untilLong('the job cancelled', async () => (await job(id))?.state === 'cancelled')
    expect(await job(id)).toMatchObject({ state: 'cancelled', outcome: 'paused' })
    expect(readTask(s.tree, uuid)).toMatchObject({ location: 'paused', state: { status: 'paused', turns: 0 } })
    expect(s.fake.requests).toHaveLength(0)
    // Not queued again: the cancelled job is the task's last.
    expect(await query('SELECT count(*)::int AS n FROM fleet_jobs')).toEqual([{ n: 1 }])
    await stopWorker(worker)
  })

  it("agent started, its task taken, before its first turn: the pause request is this run's; no LLM request", { timeout: 180_000 }, async () => {
    const s = await runSetup()
    s.fake.fallback = () => ({ calls: [{ name: 'finish', arguments: { summary: 'done', status: 'done' } }] })
    const hold = holdAt('run:after-take')
    const worker = startWorker(s, database.server.url, [], hold.env)
    const { uuid, id } = await queued(s, ['--task', 'look around', '--workspace', s.ws])
    await untilLong('the agent took its task', hold.reached)
    expect(readTask(s.tree, uuid).location).toBe('running')
    const cancelling = s.run(['jobs', 'cancel', String(id), '--json'], db())
    const inbox = join(s.tree.layout.taskDir('running', uuid), 'inbox.jsonl')
    await untilLong('the pause request written', () => existsSync(inbox) && readFileSync(inbox, 'utf8').includes('"action":"pause"'))
    hold.release()
    const cancelled = await cancelling
    expect(cancelled.code, cancelled.stderr).toBe(0)
    expect(JSON.parse(cancelled.stdout)).toEqual({ job: id, task_uuid: uuid, state: 'cancelled', task: 'paused' })
    await untilLong('the job cancelled', async () => (await job(id))?.state === 'cancelled')
    expect(await job(id)).toMatchObject({ state: 'cancelled', outcome: 'paused' })
    expect(readTask(s.tree, uuid)).toMatchObject({ location: 'paused', state: { status: 'paused', paused_by: 'operator', turns: 0 } })
    expect(s.fake.requests).toHaveLength(0)
    await stopWorker(worker)
  })

  it('running: its task pauses, the job ends cancelled and is not run again', { timeout: 180_000 }, async () => {
    const s = await runSetup()
    let n = 0
    s.fake.fallback = () => ({ calls: [{ name: 'glob', arguments: { pattern: `*${n++}*` } }] })
    const worker = startWorker(s, database.server.url, [], {})
    const { uuid, id } = await queued(s, ['--task', 'look around', '--workspace', s.ws, '--max-turns', '1000000'])
    await untilLong('the task under way', () => s.fake.requests.length >= 2)
    const cancelled = await s.run(['jobs', 'cancel', String(id), '--json'], db())
    expect(cancelled.code, cancelled.stderr).toBe(0)
    expect(JSON.parse(cancelled.stdout)).toEqual({ job: id, task_uuid: uuid, state: 'cancelled', task: 'paused' })
    await untilLong('the job cancelled', async () => (await job(id))?.state === 'cancelled')
    expect(readTask(s.tree, uuid)).toMatchObject({ location: 'paused', state: { status: 'paused' } })
    expect(await query('SELECT count(*)::int AS n FROM fleet_jobs')).toEqual([{ n: 1 }])
    await stopWorker(worker)
  })
})
