import pg from 'pg'
import { describe, expect, it, onTestFinished } from 'vitest'
import { parseConfig } from '../../src/config/load.js'
import { claimBudget } from '../../src/fleet/queue/claim-budget.js'
import { JobQueue } from '../../src/fleet/queue/job-queue.js'
import { fleetCounterTotals } from '../../src/storage/index/fleet-counters.js'
import type { FleetCounts } from '../../src/storage/index/fleet-counters.js'
import { rollUpTallies } from '../../src/storage/index/fleet-tallies.js'
import { queueWaitTotals } from '../../src/storage/index/queue-waits.js'
import type { QueueWaitRow } from '../../src/storage/index/queue-waits.js'
import { uuidN } from '../fixtures/tree.js'
import { usePostgres } from '../helpers/use-postgres.js'

/**
 * The claim's tallies (docs/formats.md#fleet-tallies) under many claimers at once, on real
 * PostgreSQL: every claim and every end appends to a log, readers sum the totals and the
 * log, and roll-ups (several at once, as /metrics on two hosts and a watch-locks pass) move
 * the log into the totals while the claimers go on. No read ever sees a total fall, and at
 * the end each claim is counted once and each wait observed once.
 */
const database = usePostgres({
  schema: true,
  truncate: ['fleet_jobs', 'fleet_job_attempts', 'fleet_workers', 'user_spend', 'fleet_counters', 'fleet_counter_log', 'fleet_queue_wait_log'],
})

const CONFIG = parseConfig(
  [
    'llm:\n  provider: openai\n  max_output_tokens: 1000\n  openai:\n    model: m',
    'budgets:\n  user_daily_usd: 5',
    'pricing:\n  m:\n    prompt: 3\n    completion: 15',
  ].join('\n'),
  'config.yaml',
)
const NOW = new Date('2030-01-15T10:00:00Z')
const JOBS = 240
const CLAIMERS = 24

async function poolOf(max = 1): Promise<pg.Pool> {
  const pool = new pg.Pool({ connectionString: database.server.url, max })
  onTestFinished(() => pool.end())
  return pool
}

/** Every figure a reader shows, flat: a counter's label, a bucket's count and sum. */
function figures(counts: FleetCounts | null, waits: QueueWaitRow[]): Map<string, number> {
  const out = new Map<string, number>()
  for (const [name, labels] of Object.entries(counts ?? {})) for (const [label, n] of Object.entries(labels)) out.set(`${name}/${label}`, n)
  for (const w of waits) {
    out.set(`wait/${w.le}/n`, w.n)
    out.set(`wait/${w.le}/sum`, w.sum_seconds)
  }
  return out
}

describe('the claim’s counters and queue wait histogram, with many claimers and roll-ups at once', () => {
  it('never fall while the log is rolled up, and count each claim, end and wait once', async () => {
    const admin = await poolOf(2)
    const queue = new JobQueue(admin)
    // Two hosts' workers; half the claimers with a money cap configured (none near it: the claim reads the spend).
    await admin.query(
      `INSERT INTO fleet_workers (id, hostname, host_id, pid, concurrency) SELECT 'host-' || (i % 2) || ':' || i || ':w', 'host-' || (i % 2), 'boot', i, 1 FROM generate_series(0, $1 - 1) i`,
      [CLAIMERS],
    )
    await admin.query(`INSERT INTO user_spend ("user", day, usd, requests) VALUES ('alice', '2030-01-15', 1, 1), ('bob', '2030-01-14', 2, 1)`)
    for (let n = 1; n <= JOBS; n++)
      await queue.enqueue({ task_uuid: uuidN(n), kind: 'new', spec: { task: `job ${n}` }, user: ['alice', 'bob', null][n % 3] ?? null })
    const budget = claimBudget(CONFIG, 'ctxagent')?.(NOW) ?? null
    expect(budget).not.toBeNull()
    const before = figures(await fleetCounterTotals(admin), await queueWaitTotals(admin))

    let claiming = true
    const readers = Array.from({ length: 3 }, async (_, r) => {
      const pool = await poolOf()
      let last = new Map<string, number>()
      let reads = 0
      let rolled = 0
      // At least a few reads and roll-ups, and on until the claimers are done.
      while (claiming || reads < 3) {
        if (await rollUpTallies(pool)) rolled++
        const now = figures(await fleetCounterTotals(pool), await queueWaitTotals(pool))
        for (const [key, n] of last) expect(now.get(key) ?? 0, `reader ${r}: ${key}`).toBeGreaterThanOrEqual(n)
        last = now
        reads++
      }
      return rolled
    })
    const claimed: number[] = []
    await Promise.all(
      Array.from({ length: CLAIMERS }, async (_, i) => {
        const worker = `host-${i % 2}:${i}:w`
        const mine = new JobQueue(await poolOf())
        for (;;) {
          const job = await mine.claim(worker, null, { channel: `idle_${i}`, staleSeconds: 60 }, i % 2 === 0 ? budget : null)
          if (job === null) return
          claimed.push(job.id)
          expect(await mine.finish(job, worker, { outcome: 'completed' })).toMatchObject({ state: 'done' })
        }
      }),
    )
    claiming = false
    const rolled = (await Promise.all(readers)).reduce((a, b) => a + b, 0)
    expect(rolled).toBeGreaterThan(0)

    // Each job claimed once; each claim counted once (by its host), each end once, each wait observed once.
    expect(new Set(claimed).size).toBe(JOBS)
    expect(claimed.length).toBe(JOBS)
    const counts = await fleetCounterTotals(admin)
    const waits = await queueWaitTotals(admin)
    const after = figures(counts, waits)
    const grew = (key: string) => (after.get(key) ?? 0) - (before.get(key) ?? 0)
    expect(grew('claims/host-0') + grew('claims/host-1')).toBe(JOBS)
    expect(grew('claims/host-0')).toBeGreaterThan(0)
    expect(grew('finished/completed')).toBe(JOBS)
    expect(waits.reduce((sum, w) => sum + w.n, 0) - [...before].filter(([k]) => k.endsWith('/n')).reduce((s, [, n]) => s + n, 0)).toBe(JOBS)
    // A last roll-up leaves the log empty and the totals as they were read.
    expect(await rollUpTallies(admin)).toBe(true)
    expect((await admin.query('SELECT (SELECT count(*) FROM fleet_counter_log) + (SELECT count(*) FROM fleet_queue_wait_log) AS n')).rows[0]?.n).toBe('0')
    expect(figures(await fleetCounterTotals(admin), await queueWaitTotals(admin))).toEqual(after)
  })

  it('a roll-up under way makes another leave the log to it (they take turns, never count twice)', async () => {
    const pool = await poolOf(2)
    const first = await pool.connect()
    try {
      await first.query('BEGIN')
      await first.query(`INSERT INTO fleet_counter_log (name, label) VALUES ('claims', 'host-x')`)
      expect(await rollUpTallies(first)).toBe(true)
      // Its lock held until it commits: a second roll-up moves nothing and says so.
      const other = await poolOf()
      await other.query(`INSERT INTO fleet_counter_log (name, label) VALUES ('claims', 'host-x')`)
      expect(await rollUpTallies(other)).toBe(false)
      await first.query('COMMIT')
      expect((await fleetCounterTotals(other))?.claims['host-x']).toBe(2)
      expect(await rollUpTallies(other)).toBe(true)
      expect((await fleetCounterTotals(other))?.claims['host-x']).toBe(2)
      expect((await other.query<{ n: string }>(`SELECT n FROM fleet_counters WHERE name = 'claims' AND label = 'host-x'`)).rows[0]?.n).toBe('2')
    } finally {
      first.release()
    }
  })
})
