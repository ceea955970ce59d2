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
