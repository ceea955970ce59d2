import pg from 'pg'
import { describe, expect, it, onTestFinished } from 'vitest'
import { fleetCounterTotals, PG_FLEET_COUNTERS_MIGRATION } from '../../../src/storage/index/fleet-counters.js'
import { migrate, SCHEMA_VERSION, versionBefore } from '../../../src/storage/index/pg-schema.js'
import { usePostgres } from '../../helpers/use-postgres.js'

/**
 * The fleet counters' migration (storage/index/fleet-counters.ts) on a fleet that keeps running
 * while a host upgrades: it locks the jobs and their history in the order the fleet's own
 * transactions take them, so that a transaction halfway through waits for it, or it for the
 * transaction, and neither is aborted as a deadlock. And the tallies' migration after it
 * (storage/index/fleet-tallies.ts: the counters' events to a log) the same way: a transaction
 * that counted under the old adding function is counted once. On real PostgreSQL.
 */

/** The schema as the version before the counters made it, or before the tallies' logs (the migrations after, IF NOT EXISTS, run again as they are). */
const BEFORE = {
  counters: `DROP TABLE fleet_counter_log, fleet_queue_wait_log; DROP FUNCTION fleet_tallies_roll_up(); DROP INDEX idx_fleet_jobs_claimable;
     DROP TRIGGER fleet_jobs_count ON fleet_jobs; DROP TRIGGER fleet_job_attempts_count ON fleet_job_attempts; DROP TABLE fleet_counters;
     UPDATE ctxagent_schema SET version = ${versionBefore(PG_FLEET_COUNTERS_MIGRATION)}`,
  tallies: `DROP TABLE fleet_counter_log, fleet_queue_wait_log; DROP FUNCTION fleet_tallies_roll_up(); DROP INDEX idx_fleet_jobs_claimable;
     CREATE OR REPLACE FUNCTION fleet_counters_add(TEXT, TEXT) RETURNS void LANGUAGE sql AS $$
       INSERT INTO fleet_counters (name, label, n) VALUES ($1, $2, 1) ON CONFLICT (name, label) DO UPDATE SET n = fleet_counters.n + 1
     $$;
     UPDATE ctxagent_schema SET version = ${versionBefore(PG_FLEET_COUNTERS_MIGRATION) + 1}`,
}
const database = usePostgres()

async function client(): Promise<pg.Client> {
  const c = new pg.Client({ connectionString: database.server.url })
  await c.connect()
  onTestFinished(() => c.end())
  return c
}

/**
 * A worker's transaction that ends a job: `first` (its first statement, before the upgrade
 * starts), then, once the upgrade waits for a lock (or is done), its attempt and its job's end. Both must
 * go through; the end counted once (by the migration's first values, or by the trigger).
 */
async function endDuringUpgrade(first: string, from: keyof typeof BEFORE = 'counters'): Promise<void> {
  await database.query('DROP SCHEMA public CASCADE; CREATE SCHEMA public')
  const setup = await client()
  await migrate(setup as unknown as pg.PoolClient)
  await setup.query(BEFORE[from])
  const id = Number(
    (
      await setup.query<{ id: string }>(
        `INSERT INTO fleet_jobs (task_uuid, kind, spec, state, claimed_by, attempts) VALUES ('t-1', 'new', '{}', 'running', 'host-a:1:w', 3) RETURNING id`,
      )
    ).rows[0]?.id,
  )
  const worker = await client()
  await worker.query('BEGIN')
  await worker.query(first, [id])
  // The upgrade starts meanwhile.
  const upgrading = await client()
  const pid = Number((await upgrading.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]?.pid)
  let settled = false
  const migrated = migrate(upgrading as unknown as pg.PoolClient).then(
    () => null,
    (err: unknown) => err as Error,
  )
  void migrated.finally(() => {
    settled = true
  })
  // Until it waits for a lock the worker holds (or, taking none the worker holds, it is done).
  while (!settled) {
    const waiting = await setup.query('SELECT 1 FROM pg_locks WHERE pid = $1 AND NOT granted', [pid])
    if (waiting.rowCount !== null && waiting.rowCount > 0) break
    await new Promise((resolve) => setTimeout(resolve, 20))
  }
  // The worker's transaction goes on: its attempt, then its job ended; committed.
  const ended = (async () => {
    await worker.query(
      `INSERT INTO fleet_job_attempts (job_id, attempt, worker_id, outcome, reason, again) VALUES ($1, 3, 'host-a:1:w', 'failed', 'killed', false)`,
      [id],
    )
    await worker.query(`UPDATE fleet_jobs SET state = 'failed', outcome = 'failed', finished_at = now() WHERE id = $1`, [id])
    await worker.query('COMMIT')
    return null
  })().catch(async (err: unknown) => {
    await worker.query('ROLLBACK').catch(() => undefined)
    return err as Error
  })
  expect((await ended)?.message ?? null).toBeNull()
  expect((await migrated)?.message ?? null).toBeNull()
  expect((await setup.query('SELECT version FROM ctxagent_schema')).rows).toEqual([{ version: SCHEMA_VERSION }])
  const pool = new pg.Pool({ connectionString: database.server.url, max: 1 })
  onTestFinished(() => pool.end())
  const counts = await fleetCounterTotals(pool)
  // The job's claim: counted by the counters' first values (its row), or, upgrading from them, not at all here (it was inserted running).
  expect(counts).toMatchObject({ claims: from === 'counters' ? { unknown: 1 } : {}, finished: { failed: 1 } })
}

describe('the fleet counters’ migration, with the fleet running', () => {
  it('a transaction that read its job FOR UPDATE, then writes its history and its job (endJob), goes through, and so does the upgrade', async () => {
    await endDuringUpgrade(`SELECT 1 FROM fleet_jobs WHERE id = $1 FOR UPDATE`)
  })

  it('a transaction that wrote its job before its history (the last attempt of a hand-back, a reaper’s settle) is not deadlocked by it', async () => {
    // As JobQueue.retry's on the last attempt: its UPDATE matches no row (attempts are spent), then endJob writes the attempt.
    await endDuringUpgrade(`UPDATE fleet_jobs SET state = 'waiting' WHERE id = $1 AND attempts < 3`)
  })

  it('the tallies’ migration: a transaction that read its job FOR UPDATE goes through and is counted once, and so does the upgrade', async () => {
    await endDuringUpgrade(`SELECT 1 FROM fleet_jobs WHERE id = $1 FOR UPDATE`, 'tallies')
  })

  it('the tallies’ migration: a transaction that wrote its job first is not deadlocked by it, and is counted once', async () => {
    await endDuringUpgrade(`UPDATE fleet_jobs SET state = 'waiting' WHERE id = $1 AND attempts < 3`, 'tallies')
  })
})
