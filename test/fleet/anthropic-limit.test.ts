import { spawn } from 'node:child_process'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, expect, it, onTestFinished } from 'vitest'
import { makeTree } from '../fixtures/tree.js'
import { startFakeAnthropic } from '../helpers/fake-anthropic.js'
import { FAST_LOCKS, until } from '../helpers/fleet-hosts.js'
import { BIN, ROOT, TEST_ENV } from '../helpers/run.js'
import { cliAuto } from '../helpers/in-process.js'
import { usePostgres } from '../helpers/use-postgres.js'
import { exitOf } from '../helpers/wait.js'

/**
 * docs/fleet-operations.md#waits with Anthropic's client: a 529 whose
 * anthropic-ratelimit reset is an hour away is a usage limit, as a 429 with Retry-After is
 * on the OpenAI-compatible side (one mechanism: the spend guard's rate-limit pause). The
 * fleet's agent pauses (paused_by rate-limit, resume_at) and its job waits until then, no
 * attempt spent; the test moves the row's time (the database's clock) and it completes.
 */
const database = usePostgres({ truncate: ['fleet_jobs', 'fleet_workers', 'tasks', 'fleet_job_attempts'] })

describe("Anthropic's usage limit in the fleet", () => {
  it('the job waits until the reset, spends no attempt, and completes once the limit lifts', { timeout: 240_000 }, async () => {
    const tree = makeTree()
    const ws = mkdtempSync(join(tmpdir(), 'ctxagent-ws-'))
    onTestFinished(() => rmSync(ws, { recursive: true, force: true }))
    writeFileSync(join(ws, 'a.txt'), 'a\n')
    const fake = await startFakeAnthropic()
    const config = join(tree.base, 'config.yaml')
    // fleet.retry.max_attempts 1: an outage would fail the job at once; a wait spends nothing.
    writeFileSync(config, fake.configYaml(`  max_retry_wait: 1\n${FAST_LOCKS}  retry:\n    base_seconds: 0.1\n    max_seconds: 0.5\n    max_attempts: 1\n`))
    const reset = new Date(Date.now() + 3_600_000).toISOString().replace(/\.\d{3}Z$/, 'Z')
    fake.queue.push({
      status: 529,
      error: { type: 'overloaded_error', message: 'Overloaded' },
      headers: { 'anthropic-ratelimit-input-tokens-reset': reset, 'anthropic-ratelimit-input-tokens-remaining': '0' },
    })
    fake.fallback = () => ({ calls: [{ name: 'finish', arguments: { summary: 'done', status: 'done' } }] })
    const common = ['--home', tree.base, '--config', config]
    const worker = spawn(process.execPath, [BIN, 'worker', '--concurrency', '1', ...common], {
      cwd: ROOT,
      env: { ...process.env, ...TEST_ENV, ...database.env() },
      stdio: ['ignore', 'ignore', 'pipe'],
    })
    let err = ''
    worker.stderr?.on('data', (d: Buffer) => (err += d.toString()))
    onTestFinished(() => {
      if (worker.exitCode === null && worker.signalCode === null) worker.kill('SIGKILL')
    })
    const queued = await cliAuto(['enqueue', '--task', 'look', '--workspace', ws, ...common], database.env())
    expect(queued.code, queued.stderr).toBe(0)
    const uuid = queued.stdout.trim()
    const rows = () =>
      database.query<{ id: number; state: string; attempts: number; limit_waits: number; wait_reason: string | null; next_run_at: Date | null }>(
        'SELECT id::int, state, attempts, limit_waits, wait_reason, next_run_at FROM fleet_jobs',
      )
    const [waiting] = await until('the job waiting out the limit', async () => {
      const all = await rows()
      return all[0]?.wait_reason === 'rate-limit' ? all : null
    })
    expect(waiting).toMatchObject({ state: 'retrying', attempts: 1, limit_waits: 1 })
    expect(waiting?.next_run_at?.toISOString()).toBe(reset.replace('Z', '.000Z'))
    // The SDK did not retry it before the reset: one request.
    expect(fake.requests).toHaveLength(1)
    const shown = await cliAuto(['view', uuid, '--json', ...common])
    expect(JSON.parse(shown.stdout)).toMatchObject({ state: { status: 'paused', paused_by: 'rate-limit', resume_at: reset.replace('Z', '.000Z') } })
    // The limit lifts: the key's record goes (time passing), and the row's time comes.
    await database.query('DELETE FROM llm_key_limits')
    await database.query('UPDATE fleet_jobs SET next_run_at = now() WHERE id = $1', [waiting?.id])
    await until('the job done', async () => (await rows())[0]?.state === 'done')
    expect((await rows())[0]).toMatchObject({ attempts: 2, limit_waits: 1 })
    expect(err).toMatch(/waits until \S+ \(rate-limit; no attempt spent/)
    worker.kill('SIGTERM')
    expect((await exitOf(worker)).code).toBe(0)
  })
})
