import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { TaskIndex } from '../../../src/storage/index/task-index.js'
import { makeTree } from '../../fixtures/tree.js'
import { cliAsync } from '../../helpers/run.js'
import { cliAuto } from '../../helpers/in-process.js'
import { usePostgres } from '../../helpers/use-postgres.js'
import { runSetup } from '../../run/harness.js'

/*
 * Issue 40 #11: one spend ledger (docs/fleet-operations.md#joining-a-fleet). A user who
 * spent $0.35 of a $0.40 daily cap on one host, whose tree then joins a fleet, has spent
 * $0.35 in the fleet too: `reindex` carries tasks.db's user_spend into PostgreSQL (once:
 * a second reindex adds nothing), and so does the tree's first fleet use; the cap then
 * refuses a task the $0.05 left cannot start. On real PostgreSQL.
 */
const database = usePostgres({ truncate: ['user_spend', 'user_spend_carried'] })

const today = (): string => new Date().toISOString().slice(0, 10)

/** A first request asks for 4,000 completion tokens at $15 a million: $0.06, more than the $0.05 left. */
const CAPS = 'budgets:\n  user_daily_usd: 0.40\n  timezone: UTC\npricing:\n  fake-model:\n    prompt: 3\n    completion: 15\n'

const fleetSpend = async (user: string) =>
  (await database.query<{ usd: number }>('SELECT usd FROM user_spend WHERE "user" = $1 AND day = $2', [user, today()])).map((r) => Number(r.usd))

function spendOnHost(db: string, user: string, usd: number): void {
  const index = TaskIndex.open(db)
  try {
    index.spend.add(user, today(), usd)
  } finally {
    index.close()
  }
}

describe('one spend ledger when a tree joins a fleet', () => {
  it("reindex carries the day's spend from tasks.db into PostgreSQL once, and the fleet's cap counts it", { timeout: 120_000 }, async () => {
    const s = await runSetup(CAPS)
    writeFileSync(s.config, s.fake.configYaml(CAPS).replace('llm:\n', 'llm:\n  max_output_tokens: 4000\n'))
    spendOnHost(s.tree.layout.db, 'alice', 0.2)
    spendOnHost(s.tree.layout.db, 'alice', 0.15)
    const home = ['--home', s.tree.base, '--config', s.config]
    const first = await cliAuto(['reindex', '--json', ...home], database.env())
    expect(first.code, first.stderr).toBe(0)
    expect(await fleetSpend('alice')).toEqual([0.35])
    // Again: nothing more is added.
    const again = await cliAuto(['reindex', ...home], database.env())
    expect(again.code, again.stderr).toBe(0)
    expect(await fleetSpend('alice')).toEqual([0.35])
    // The host spent more after the first carry: only that is added.
    spendOnHost(s.tree.layout.db, 'alice', 0.01)
    expect((await cliAuto(['reindex', ...home], database.env())).code).toBe(0)
    const [carried] = await fleetSpend('alice')
    expect(carried).toBeCloseTo(0.36, 10)
    // In the fleet, the cap refuses what the $0.04 left cannot start (exit 5), nothing sent.
    const run = await cliAsync(['run', '--task', 't', '--user', 'alice', '--workspace', s.ws, ...home], database.env())
    expect({ code: run.code, err: run.stderr }).toMatchObject({ code: 5, err: expect.stringContaining('user_daily_usd') })
    expect(s.fake.requests).toHaveLength(0)
  })

  it("a tree's first fleet use (any command but an agent's) carries it too", { timeout: 60_000 }, async () => {
    const tree = makeTree()
    const config = join(tree.base, 'config.yaml')
    writeFileSync(config, CAPS)
    spendOnHost(tree.layout.db, 'bob', 0.35)
    const r = await cliAuto(['stats', '--home', tree.base, '--config', config], database.env())
    expect(r.code, r.stderr).toBe(0)
    expect(r.stderr).toContain('carried $0.35 of spend from')
    expect(await fleetSpend('bob')).toEqual([0.35])
    expect((await cliAuto(['stats', '--home', tree.base, '--config', config], database.env())).code).toBe(0)
    expect(await fleetSpend('bob')).toEqual([0.35])
  })
})
