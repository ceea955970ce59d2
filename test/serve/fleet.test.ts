import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest'
import { makeTree, uuidN } from '../fixtures/tree.js'
import { cliAuto } from '../helpers/in-process.js'
import { queryRows, startPostgres } from '../helpers/postgres.js'
import type { PgServer } from '../helpers/postgres.js'
import { configWith, startServe, TOKEN } from './helpers.js'
import { parseExposition, total } from './exposition.js'

let server: PgServer
beforeAll(async () => {
  server = await startPostgres()
})
afterAll(async () => {
  await server?.stop()
})

describe('serve with a fleet (PostgreSQL)', () => {
  it('the fleet as fleet --json gives it, its metrics, and resume queued as enqueue --resume queues it', async () => {
    const tree = makeTree()
    tree.write({ uuid: uuidN(1), user: 'alice' })
    tree.write({ uuid: uuidN(2), user: 'bob', location: 'paused' })
    const config = configWith(tree, `serve:\n  token: ${TOKEN}\n`)
    const env = { CTXAGENT_DATABASE_URL: server.url }
    const run = (args: string[]) => cliAuto([...args, '--home', tree.base, '--config', config], env)
    expect((await run(['reindex'])).code).toBe(0)
    // A workspace of their own: enqueue refuses one that holds the tree, as run does.
    const ws = mkdtempSync(join(tmpdir(), 'ctxagent-serve-ws-'))
    onTestFinished(() => rmSync(ws, { recursive: true, force: true }))
    for (const task of ['one', 'two']) {
      const queued = await run(['enqueue', '--task', task, '--workspace', ws])
      expect(queued.code, queued.stderr).toBe(0)
    }
    // One attempt in a job's history that waited out a budget window (as a worker records it): counted on /metrics.
    await queryRows(
      server.url,
      `INSERT INTO fleet_job_attempts (job_id, attempt, outcome, reason, cap, again) VALUES (999999, 1, 'paused', 'budget', 'user-daily', true)`,
    )
    const s = await startServe(tree.base, { config, env })
    const auth = { authorization: `Bearer ${TOKEN}`, 'x-ctxagent-operator': 'frank' }
    // A token is configured: every read needs it, on loopback too (docs/serve.md#security).
    for (const path of ['/api/fleet', '/api/jobs', '/metrics']) expect((await s.get(path)).status, path).toBe(401)
    expect((await s.get('/fleet')).status).toBe(303)
    const read = { headers: { authorization: `Bearer ${TOKEN}` } }
    const api = (await (await s.get('/api/fleet', read)).json()) as { oldest_waiting: { waiting_seconds: number } }
    const cli = JSON.parse((await run(['fleet', '--json'])).stdout) as { oldest_waiting: { waiting_seconds: number } }
    expect({ ...api, oldest_waiting: { ...api.oldest_waiting, waiting_seconds: 0 } }).toEqual({
      ...cli,
      oldest_waiting: { ...cli.oldest_waiting, waiting_seconds: 0 },
    })
    expect(api).toMatchObject({ jobs: { waiting: 2, running: 0, done: 0 }, workers: [] })
    const m = parseExposition(await (await s.get('/metrics', read)).text())
    expect(total(m, 'ctxagent_jobs', { state: 'waiting' })).toBe(2)
    // Waits are observed when a job is claimed (test/serve/queue-wait.test.ts): none has been.
    expect(total(m, 'ctxagent_queue_wait_seconds', {}, 'ctxagent_queue_wait_seconds_count')).toBe(0)
    expect(total(m, 'ctxagent_queue_oldest_waiting_seconds')).toBeGreaterThan(0)
    expect(total(m, 'ctxagent_scrape_errors')).toBe(0)
    expect(total(m, 'ctxagent_job_retries_total', { reason: 'budget' })).toBe(1)
    expect(total(m, 'ctxagent_budget_pauses_total', { cap: 'user-daily' })).toBe(1)
    // No worker while jobs wait: stats --check's critical alert, as a gauge.
    expect(total(m, 'ctxagent_alert', { name: 'queue_no_worker', severity: 'critical' })).toBe(1)
    expect(total(m, 'ctxagent_tasks')).toBe(2)
    const page = await (await s.get('/fleet', read)).text()
    expect(page).toContain('<dt>waiting</dt><dd>2</dd>')
    const resumed = await s.get(`/api/tasks/${uuidN(2)}/resume`, { method: 'POST', headers: auth })
    expect(resumed.status).toBe(200)
    const { job } = (await resumed.json()) as { job: number }
    const rows = await queryRows<{ task_uuid: string; kind: string; state: string }>(
      server.url,
      'SELECT task_uuid, kind, state FROM fleet_jobs WHERE id = $1',
      [job],
    )
    expect(rows).toEqual([{ task_uuid: uuidN(2), kind: 'resume', state: 'waiting' }])
    // Queued once: a second resume is a conflict, as enqueue --resume says.
    expect((await s.get(`/api/tasks/${uuidN(2)}/resume`, { method: 'POST', headers: auth })).status).toBe(409)

    // Jobs: /api/jobs is jobs --json; cancel and retry are the CLI's, need the token, and are audited.
    const listed = (await (await s.get('/api/jobs', read)).json()) as { id: number; state: string; task_uuid: string }[]
    const cliJobs = (await run(['jobs', '--json'])).stdout
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { id: number })
    expect(listed).toEqual(cliJobs)
    const first = listed.find((j) => j.state === 'waiting' && j.task_uuid !== uuidN(2)) as { id: number; task_uuid: string }
    expect((await s.get(`/api/jobs/${first.id}/cancel`, { method: 'POST' })).status).toBe(401)
    const cancelled = await s.get(`/api/jobs/${first.id}/cancel`, { method: 'POST', headers: auth })
    expect(cancelled.status).toBe(200)
    expect(await cancelled.json()).toMatchObject({ job: first.id, state: 'cancelled' })
    expect((await queryRows<{ state: string }>(server.url, 'SELECT state FROM fleet_jobs WHERE id = $1', [first.id]))[0]?.state).toBe('cancelled')
    expect((await s.get(`/api/jobs/${first.id}/cancel`, { method: 'POST', headers: auth })).status).toBe(409)
    const retried = await s.get(`/api/jobs/${first.id}/retry`, { method: 'POST', headers: auth })
    expect(retried.status).toBe(200)
    expect((await queryRows<{ state: string }>(server.url, 'SELECT state FROM fleet_jobs WHERE id = $1', [first.id]))[0]?.state).toBe('waiting')
    expect((await s.get('/api/jobs/999999/retry', { method: 'POST', headers: auth })).status).toBe(404)
    expect((await s.get('/api/jobs?state=nonsense', read)).status).toBe(400)
    const fleetPage = await (await s.get('/fleet', read)).text()
    expect(fleetPage).toContain(`<td class="n">${first.id}</td><td>waiting</td>`)
    // Read with the bearer token: signed in, so the job rows carry their Cancel/Retry forms.
    expect(fleetPage).not.toContain('sign in to cancel or retry')
    expect(fleetPage).toContain(`action="/jobs/${first.id}/cancel"`)
  })
  it('a job waiting out a usage limit shows as a wait, its reason and until when, never among the errors (docs/fleet-operations.md#waits)', async () => {
    const tree = makeTree()
    const config = configWith(tree, `serve:\n  token: ${TOKEN}\n`)
    const env = { CTXAGENT_DATABASE_URL: server.url }
    const run = (args: string[]) => cliAuto([...args, '--home', tree.base, '--config', config], env)
    const ws = mkdtempSync(join(tmpdir(), 'ctxagent-serve-ws-'))
    onTestFinished(() => rmSync(ws, { recursive: true, force: true }))
    const ids: number[] = []
    for (const task of ['limited', 'broken']) {
      const queued = await run(['enqueue', '--task', task, '--workspace', ws])
      expect(queued.code, queued.stderr).toBe(0)
      const uuid = queued.stdout.trim()
      const row = await queryRows<{ id: number }>(server.url, 'SELECT id FROM fleet_jobs WHERE task_uuid = $1', [uuid])
      ids.push(Number(row[0]?.id))
    }
    const [limited, broken] = ids
    // As a worker ends them (test/fleet/waits.test.ts): one waits out a usage limit, one failed.
    const until = '2036-12-06T10:00:00.000Z'
    const why = `http://llm answered 429: a usage limit until ${until}: usage limit reached`
    await queryRows(
      server.url,
      `UPDATE fleet_jobs SET state = 'retrying', outcome = 'paused', attempts = 1, limit_waits = 1, wait_reason = 'rate-limit', next_run_at = $2, error = $3, finished_at = now() WHERE id = $1`,
      [limited, until, why],
    )
    await queryRows(
      server.url,
      `UPDATE fleet_jobs SET state = 'failed', outcome = 'failed', attempts = 1, error = 'the agent crashed', finished_at = now() WHERE id = $1`,
      [broken],
    )
    const s = await startServe(tree.base, { config, env })
    const page = await (await s.get('/fleet', { headers: { authorization: `Bearer ${TOKEN}` } })).text()
    const errors = page.slice(page.indexOf('<h2>Recent job errors</h2>'), page.indexOf('</section>', page.indexOf('<h2>Recent job errors</h2>')))
    expect(errors).toContain('the agent crashed')
    expect(errors).not.toContain('usage limit')
    const rowOf = (id: number | undefined) =>
      page.slice(page.indexOf(`<tr><td class="n">${id}</td><td>`), page.indexOf('</tr>', page.indexOf(`<tr><td class="n">${id}</td><td>`)))
    const waiting = rowOf(limited)
    expect(waiting).toContain(`waiting for rate-limit until ${until}`)
    expect(waiting).toContain(`<td class="wait">${why}</td>`)
    expect(waiting).not.toContain('class="error"')
    expect(rowOf(broken)).toContain('<td class="error">the agent crashed</td>')
  })
})
