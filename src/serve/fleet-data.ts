import type { Pool } from 'pg'
import { standing } from '../eval/enqueue-trials.js'
import type { TrialsStanding } from '../eval/enqueue-trials.js'
import type { EvalSpec } from '../eval/store.js'
import type { CommandEnv } from '../command-env.js'
import { fleetDatabaseUrl } from '../command-env.js'
import { listJobs } from '../fleet/queue/job-admin.js'
import type { JobFilter, JobRow } from '../fleet/queue/job-admin.js'
import { fleetStatus } from '../fleet/queue/status.js'
import type { FleetStatus } from '../fleet/queue/status.js'
import { connectPool } from '../storage/index/pg-pool.js'
import { queueWaitTotals } from '../storage/index/queue-waits.js'
import { countsFromRows, fleetCounterTotals } from '../storage/index/fleet-counters.js'
import { rollUpTallies } from '../storage/index/fleet-tallies.js'
import type { FleetCounts } from '../storage/index/fleet-counters.js'
import type { QueueWaitRow } from '../storage/index/queue-waits.js'
import type { TaskIndex } from '../storage/index/task-index.js'
import { workerLiveSeconds } from '../storage/index/worker-liveness.js'

export interface JobError {
  id: number
  task_uuid: string
  outcome: string | null
  error: string
  finished_at: string | null
}

/**
 * `fleet --json`, and for the page the newest jobs that ended with an error (a job waiting out a usage limit or a
 * budget window is waiting, not failing: docs/fleet-operations.md#waits) and the running count per user.
 */
export interface FleetData extends FleetStatus {
  recent_errors: JobError[]
  running_by_user: { user: string | null; running: number }[]
  /** The newest jobs, as `ctxagent jobs` lists them. */
  recent_jobs: JobRow[]
}

/** One pool for the server's life (fleet pages and scrapes), made when the fleet is first asked about. */
export class FleetSource {
  private pool: Promise<Pool> | null = null

  constructor(private readonly ctx: CommandEnv) {}

  get configured(): boolean {
    return fleetDatabaseUrl(this.ctx) !== null
  }

  private connect(): Promise<Pool> {
    const url = fleetDatabaseUrl(this.ctx)
    if (url === null) throw new Error('no fleet database is configured')
    this.pool ??= connectPool(url, 'serve', 2).catch((err: unknown) => {
      this.pool = null
      throw err
    })
    return this.pool
  }

  /** How an eval's trial jobs stand (docs/eval.md#in-the-fleet); null with no fleet configured. */
  async evalStanding(spec: EvalSpec, dir: string): Promise<TrialsStanding | null> {
    if (!this.configured) return null
    return standing(await this.connect(), spec, dir)
  }

  async status(): Promise<FleetStatus> {
    return fleetStatus(await this.connect(), workerLiveSeconds(this.ctx.config.locks))
  }

  async data(db: TaskIndex): Promise<FleetData> {
    const pool = await this.connect()
    const status = await fleetStatus(pool, workerLiveSeconds(this.ctx.config.locks))
    const errors = await pool.query<Record<string, unknown>>(
      `SELECT id, task_uuid, outcome, error, finished_at FROM fleet_jobs WHERE error IS NOT NULL AND NOT (state = 'retrying' AND wait_reason IS NOT NULL) ORDER BY finished_at DESC NULLS FIRST, id DESC LIMIT 20`,
    )
    const running = db.db.prepare(`SELECT user, COUNT(*) AS running FROM tasks WHERE location = 'running' GROUP BY user ORDER BY running DESC, user`).all() as {
      user: string | null
      running: number
    }[]
    return {
      ...status,
      recent_errors: errors.rows.map((r) => ({
        id: Number(r.id),
        task_uuid: String(r.task_uuid),
        outcome: r.outcome === null ? null : String(r.outcome),
        error: String(r.error),
        finished_at: r.finished_at instanceof Date ? r.finished_at.toISOString() : null,
      })),
      running_by_user: running,
      recent_jobs: await listJobs(pool, { limit: 50 }),
    }
  }

  /** `ctxagent jobs --json`'s rows (GET /api/jobs). */
  async jobs(filter: JobFilter): Promise<JobRow[]> {
    return listJobs(await this.connect(), filter)
  }

  /**
   * For /metrics: the queue wait histogram's totals (each claim's wait, observed once) and the
   * fleet's counters (claims by host, finished jobs by outcome, retries by reason, budget pauses
   * by cap), both running totals that cleanup leaves (docs/serve.md#fleet-counters). A schema
   * older than the counters' table: counted from the rows still kept, as before it. The
   * logs since the last roll-up are rolled up first, so that the read stays short
   * (docs/formats.md#fleet-tallies).
   */
  async queueFigures(): Promise<{ waits: QueueWaitRow[]; counts: FleetCounts }> {
    const pool = await this.connect()
    await rollUpTallies(pool)
    const waits = await queueWaitTotals(pool)
    return { waits, counts: (await fleetCounterTotals(pool)) ?? (await countsFromRows(pool)) }
  }

  async close(): Promise<void> {
    const pool = this.pool
    this.pool = null
    if (pool !== null) await (await pool.catch(() => null))?.end().catch(() => undefined)
  }
}
