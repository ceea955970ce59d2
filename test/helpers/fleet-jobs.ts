import pg from 'pg'
import { onTestFinished } from 'vitest'
import { JobQueue } from '../../src/fleet/queue/job-queue.js'
import { uuidN } from '../fixtures/tree.js'
import type { TestDatabase } from './use-postgres.js'

/** One row of `fleet_jobs` as the fleet's tests read it (docs/formats.md#the-index-in-postgresql-a-fleet). */
export interface JobRow {
  id: number
  task_uuid: string
  kind: string
  state: string
  outcome: string | null
  error: string | null
  attempts: number
  user: string | null
  spec: Record<string, unknown>
  claimed_by: string | null
  limit_waits: number
  wait_reason: string | null
  /** Seconds from the database's now() to the job's next_run_at (negative once it passed); null with no next_run_at. */
  until_s: number | null
}

const SELECT = `SELECT id::int, task_uuid, kind, state, outcome, error, attempts, "user", spec, claimed_by, limit_waits, wait_reason,
  extract(epoch FROM next_run_at - now())::float AS until_s
  FROM fleet_jobs ORDER BY id`

/** Every job of the test's database, oldest first. */
export function fleetJobs(database: Pick<TestDatabase, 'query'>): Promise<JobRow[]> {
  return database.query<JobRow>(SELECT)
}

/** A JobQueue on the test's database through a pool of its own (`max` connections), ended when the test finishes. */
export function queueOn(database: Pick<TestDatabase, 'server'>, max = 2): JobQueue {
  const pool = new pg.Pool({ connectionString: database.server.url, max })
  onTestFinished(() => pool.end())
  return new JobQueue(pool)
}

/** `usd` spent by `user` on `day` (user_spend, what the claim's money caps read). */
export async function spend(database: Pick<TestDatabase, 'query'>, user: string, day: string, usd: number): Promise<void> {
  await database.query('INSERT INTO user_spend ("user", day, usd, requests) VALUES ($1, $2, $3, 1)', [user, day, usd])
}

/** A new job `n` (task uuidN(n), `job n`) of `user` at `priority`, queued straight on `queue`: its id. */
export async function enqueueNth(queue: JobQueue, n: number, user: string | null, priority = 0): Promise<number> {
  return (await queue.enqueue({ task_uuid: uuidN(n), kind: 'new', spec: { task: `job ${n}` }, user, priority })) as number
}
