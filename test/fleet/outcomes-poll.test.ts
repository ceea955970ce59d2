import { readFileSync } from 'node:fs'
import pg from 'pg'
import { describe, expect, it } from 'vitest'
import { parseConfig } from '../../src/config/load.js'
import { outcomesPass } from '../../src/fleet/poll/outcomes-pass.js'
import { PgStore } from '../../src/storage/index/pg-store.js'
import { makeTree } from '../fixtures/tree.js'
import { startFakeGithub } from '../helpers/fake-github.js'
import { startFakeGitlab } from '../helpers/fake-gitlab.js'
import { cliAsync } from '../helpers/run.js'
import { usePostgres } from '../helpers/use-postgres.js'
import { EXPECTED_TOTAL, forgeFacts, GH, GL, outcomeConfig, outcomeTasks } from '../operations/outcomes-fixture.js'

const database = usePostgres({ schema: true, truncate: ['tasks', 'fleet_polled', 'pull_requests'] })

describe('a poll pass refreshes the outcomes of the pull requests ctxagent opened, in the fleet’s PostgreSQL index', () => {
  it('refreshes its own repository’s, labels each with its issue’s trigger label, and stats --outcomes counts them before and after a reindex', async () => {
    const tree = makeTree()
    const gh = await startFakeGithub()
    const gl = await startFakeGitlab()
    forgeFacts(gh, gl)
    const { opener } = outcomeTasks(tree)
    const configFile = outcomeConfig(tree, gh, gl)
    const ctx = (...args: string[]) => cliAsync(['--home', tree.base, '--config', configFile, ...args], database.env())
    expect((await ctx('reindex')).code).toBe(0)
    await database.query(`INSERT INTO fleet_polled (source, ref, task_uuid, label, trigger) VALUES ('github:acme/shop', 'acme/shop#42', $1, 'done', 'agent')`, [
      opener,
    ])

    const config = parseConfig(readFileSync(configFile, 'utf8'))
    const pool = new pg.Pool({ connectionString: database.server.url, max: 2 })
    const store = await PgStore.open(database.server.url, () => undefined)
    try {
      const github = await outcomesPass(pool, store, tree.layout, config, 'github:acme/shop', new Date('2026-11-05T00:00:00Z'))
      expect(github).toEqual({ refreshed: [`${GH}/100`, `${GH}/101`, `${GH}/102`], ended: 0, errors: [] })
      // Only the poller's own repository: GitLab was not asked.
      expect(gl.requests).toEqual([])
      const gitlab = await outcomesPass(pool, store, tree.layout, config, 'gitlab:acme/backend/api', new Date('2026-11-05T00:00:00Z'))
      expect(gitlab).toEqual({ refreshed: [`${GL}/20`], ended: 0, errors: [] })
    } finally {
      await store.close()
      await pool.end()
    }

    const before = JSON.parse((await ctx('stats', '--outcomes', '--by', 'label', '--json')).stdout)
    expect(before.total).toMatchObject(EXPECTED_TOTAL)
    expect(before.groups).toEqual([
      expect.objectContaining({ key: null, opened: 3, merged: 1, closed: 1, open: 1 }),
      expect.objectContaining({ key: 'agent', opened: 1, merged: 1, rounds_per_merged: 1, reworked: 1, usd_per_merged: 0.47 }),
    ])
    expect((await ctx('reindex')).code).toBe(0)
    const after = JSON.parse((await ctx('stats', '--outcomes', '--by', 'label', '--json')).stdout)
    expect(after).toEqual(before)
  })
})
