import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { makeTree, uuidN } from '../fixtures/tree.js'
import { cliAsync } from '../helpers/run.js'
import { startPostgres } from '../helpers/postgres.js'
import type { PgServer } from '../helpers/postgres.js'
import { startServe } from './helpers.js'
import { parseExposition, total } from './exposition.js'

/*
 * The environments on /metrics (docs/environments.md#what-is-counted) through a real `serve`:
 * counted from what each task recorded (state.json `environment`), by the index's triggers in
 * tasks.db and PostgreSQL alike, right after `reindex`, and never falling when cleanup
 * deletes the tasks or reindex rebuilds the rows.
 */

let server: PgServer
beforeAll(async () => {
  server = await startPostgres()
})
afterAll(async () => {
  await server?.stop()
})

const environment = (over: Record<string, unknown>) => ({
  status: 'ready',
  file: '.ctxagent/environment.yml (origin/HEAD at 0123456789ab)',
  operator: null,
  base: 'origin/HEAD at 0123456789ab',
  cache: 'hit',
  setup_seconds: null,
  restored: ['node_modules'],
  kept: [],
  test: null,
  error: null,
  tail: null,
  ...over,
})

describe.each([
  ['tasks.db', () => ({})],
  ['PostgreSQL', () => ({ CTXAGENT_DATABASE_URL: server.url })],
] as const)('/metrics environment counters (%s)', (_name, envOf) => {
  it('count cache hits, misses and failures and setup times from state.json, right after reindex, and never fall', { timeout: 120_000 }, async () => {
    const env: Record<string, string> = envOf()
    const tree = makeTree()
    const old = { createdAt: '2024-01-10T10:00:00.000Z', completedAt: '2024-01-10T12:00:00.000Z' }
    // Setup ran for it: 12.5 s.
    tree.write({ uuid: uuidN(1), ...old, state: { environment: environment({ cache: 'miss', setup_seconds: 12.5 }) } })
    // Its result found in the cache: no setup time.
    tree.write({ uuid: uuidN(2), ...old, state: { environment: environment({ cache: 'hit' }) } })
    // Setup failed after 3 s.
    tree.write({
      uuid: uuidN(3),
      ...old,
      status: 'setup_failed',
      state: { environment: environment({ status: 'setup_failed', cache: 'failed', setup_seconds: 3, error: 'setup exited with 3' }) },
    })
    // Stopped during setup: not counted (its resume prepares again and counts then). Paused: cleanup leaves it.
    tree.write({
      uuid: uuidN(4),
      location: 'paused',
      createdAt: '2024-01-12T10:00:00.000Z',
      state: { environment: environment({ status: 'stopped', cache: 'none', error: 'stopped during setup' }) },
    })
    // A live hit, which cleanup leaves.
    tree.write({ uuid: uuidN(5), location: 'paused', createdAt: '2024-01-12T10:00:00.000Z', state: { environment: environment({ cache: 'hit' }) } })
    const run = async (args: string[]) => {
      const res = await cliAsync([...args, '--home', tree.base, '--config', 'none'], env)
      expect(res.code, res.stderr).toBe(0)
    }
    const scrape = async () => {
      const s = await startServe(tree.base, { env })
      const res = await s.get('/metrics')
      expect(res.status).toBe(200)
      const m = parseExposition(await res.text())
      await new Promise<void>((resolve) => {
        s.child.once('exit', () => resolve())
        s.child.kill('SIGTERM')
      })
      return m
    }
    const figures = (m: Awaited<ReturnType<typeof scrape>>) => {
      const h = (le: string) => total(m, 'ctxagent_env_setup_seconds', { le }, 'ctxagent_env_setup_seconds_bucket')
      return {
        hit: total(m, 'ctxagent_env_cache_total', { result: 'hit' }),
        miss: total(m, 'ctxagent_env_cache_total', { result: 'miss' }),
        failed: total(m, 'ctxagent_env_cache_total', { result: 'failed' }),
        le1: h('1'),
        le5: h('5'),
        le15: h('15'),
        le1800: h('1800'),
        inf: h('+Inf'),
        count: total(m, 'ctxagent_env_setup_seconds', {}, 'ctxagent_env_setup_seconds_count'),
        sum: total(m, 'ctxagent_env_setup_seconds', {}, 'ctxagent_env_setup_seconds_sum'),
      }
    }
    await run(['reindex'])
    const expected = { hit: 2, miss: 1, failed: 1, le1: 0, le5: 1, le15: 2, le1800: 2, inf: 2, count: 2, sum: 15.5 }
    expect(figures(await scrape())).toEqual(expected)

    await run(['cleanup'])
    // Two live tasks left; what the deleted three had stays counted.
    const cleaned = await scrape()
    expect(total(cleaned, 'ctxagent_tasks')).toBe(2)
    expect(figures(cleaned)).toEqual(expected)
    await run(['reindex'])
    expect(figures(await scrape())).toEqual(expected)
  })
})
