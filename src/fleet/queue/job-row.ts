import type { Pool, PoolClient } from 'pg'
import type { Job, JobKind, JobState, NewJob } from './job.js'
import type { JobSpec } from './job-spec.js'

/** A fleet_jobs row's columns as decodeJob reads them (`j` the row's alias). */
export const JOB_COLUMNS = 'j.id, j.task_uuid, j.kind, j.spec, j.state, j.priority, j.attempts, j.claimed_by, j."user"'

export async function insertJob(client: Pool | PoolClient, job: NewJob): Promise<number | null> {
  const result = await client.query<{ id: string }>(
    `INSERT INTO fleet_jobs (task_uuid, kind, spec, priority, "user", idempotency_key) VALUES ($1, $2, $3, $4, $5, $6)
     ON CONFLICT DO NOTHING RETURNING id`,
    [job.task_uuid, job.kind, JSON.stringify(job.spec), job.priority ?? 0, job.user ?? job.spec.user ?? null, job.key ?? null],
  )
  const row = result.rows[0]
  return row === undefined ? null : Number(row.id)
}

/** A row as it is: whether it can be run is the worker's to check (jobProblem), not taken for granted here. */
export function decodeJob(row: Record<string, unknown>): Job {
  return {
    id: Number(row.id),
    task_uuid: String(row.task_uuid),
    kind: String(row.kind) as JobKind,
    spec: (row.spec ?? {}) as JobSpec,
    state: row.state as JobState,
    priority: Number(row.priority),
    attempts: Number(row.attempts),
    claimed_by: (row.claimed_by as string | null) ?? null,
    user: typeof row.user === 'string' ? row.user : null,
  }
}
