import type { Pool } from 'pg'
import { JOB_STATES } from './job.js'
import type { JobState } from './job.js'
import { liveWorkerSql } from '../../storage/index/worker-liveness.js'

export interface FleetWorker {
  id: string
  hostname: string
  pid: number
  concurrency: number
  started_at: string
  heartbeat_at: string
  /** Heartbeat within the stale time and not stopped. */
  live: boolean
  tasks: string[]
}

export interface FleetStatus {
  /** Live workers only: a worker whose heartbeat is older than the stale time is dead, and only counted. */
  workers: FleetWorker[]
  /** Workers not stopped whose heartbeat is older than the stale time (killed, or cut off); their rows expire with fleet.retention_days. */
  dead_workers: number
  jobs: Record<JobState, number>
  /** Finished jobs by what their task became (completed, failed, paused, died, …). */
  outcomes: Record<string, number>
  oldest_waiting: { id: number; task_uuid: string; created_at: string; waiting_seconds: number } | null
}

/** The fleet at a glance (docs/contract.md §14.2 `fleet`): live workers (and how many are dead), jobs by state, the oldest waiting job. */
export async function fleetStatus(pool: Pool, liveSeconds: number): Promise<FleetStatus> {
  const workers = await pool.query<Record<string, unknown>>(
    `SELECT w.id, w.hostname, w.pid, w.concurrency, w.started_at, w.heartbeat_at,
            ${liveWorkerSql('w', '$1')} AS live,
            COALESCE(array_agg(j.task_uuid ORDER BY j.id) FILTER (WHERE j.id IS NOT NULL), '{}') AS tasks
     FROM fleet_workers w LEFT JOIN fleet_jobs j ON j.claimed_by = w.id AND j.state = 'running'
     WHERE w.stopped_at IS NULL GROUP BY w.id ORDER BY w.hostname, w.started_at`,
    [liveSeconds],
  )
  const states = await pool.query<{ state: string; n: string }>('SELECT state, count(*) AS n FROM fleet_jobs GROUP BY state')
  const outcomes = await pool.query<{ outcome: string; n: string }>(
    `SELECT outcome, count(*) AS n FROM fleet_jobs WHERE state IN ('done', 'failed', 'cancelled') GROUP BY outcome ORDER BY outcome`,
  )
  const oldest = await pool.query<Record<string, unknown>>(
    `SELECT id, task_uuid, created_at, extract(epoch FROM now() - created_at)::float AS waiting_seconds
     FROM fleet_jobs WHERE state = 'waiting' ORDER BY created_at, id LIMIT 1`,
  )
  const jobs = Object.fromEntries(JOB_STATES.map((s) => [s, 0])) as Record<JobState, number>
  for (const row of states.rows) if (row.state in jobs) jobs[row.state as JobState] = Number(row.n)
  const first = oldest.rows[0]
  const all = workers.rows.map((w) => ({
    id: String(w.id),
    hostname: String(w.hostname),
    pid: Number(w.pid),
    concurrency: Number(w.concurrency),
    started_at: (w.started_at as Date).toISOString(),
    heartbeat_at: (w.heartbeat_at as Date).toISOString(),
    live: w.live === true,
    tasks: w.tasks as string[],
  }))
  return {
    workers: all.filter((w) => w.live),
    dead_workers: all.filter((w) => !w.live).length,
    jobs,
    outcomes: Object.fromEntries(outcomes.rows.map((r) => [r.outcome ?? 'unknown', Number(r.n)])),
    oldest_waiting:
      first === undefined
        ? null
        : {
            id: Number(first.id),
            task_uuid: String(first.task_uuid),
            created_at: (first.created_at as Date).toISOString(),
            waiting_seconds: Math.round(Number(first.waiting_seconds) * 1000) / 1000,
          },
  }
}

export interface QueueAlert {
  level: 'warning' | 'critical'
  metric: 'queue_no_worker' | 'queue_wait'
  value: number
  threshold: number
  message: string
}

/** `stats --check` in a fleet: jobs waiting with no live worker; a queue older than alerts.queue_wait_minutes. */
export function queueAlerts(status: FleetStatus, waitMinutes: number): QueueAlert[] {
  const alerts: QueueAlert[] = []
  const live = status.workers.length
  if (status.jobs.waiting > 0 && live === 0) {
    alerts.push({
      level: 'critical',
      metric: 'queue_no_worker',
      value: status.jobs.waiting,
      threshold: 0,
      message: `${status.jobs.waiting} job(s) waiting and no live worker`,
    })
  }
  const oldest = status.oldest_waiting
  if (oldest !== null && oldest.waiting_seconds > waitMinutes * 60) {
    alerts.push({
      level: 'warning',
      metric: 'queue_wait',
      value: Math.round(oldest.waiting_seconds / 6) / 10,
      threshold: waitMinutes,
      message: `the oldest waiting job (${oldest.id}, task ${oldest.task_uuid.slice(0, 8)}) has waited ${(oldest.waiting_seconds / 60).toFixed(1)} min > ${waitMinutes} min`,
    })
  }
  return alerts
}
