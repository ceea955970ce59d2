import { statfsSync } from 'node:fs'
import type { Config } from '../config/schema.js'
import { taskDiskUse } from '../storage/fs/disk.js'
import type { Layout, Location } from '../storage/fs/layout.js'
import { LOCATIONS } from '../storage/fs/layout.js'
import { readLock } from '../storage/lock/record.js'
import { TaskIndex } from '../storage/index/task-index.js'
import { taskRow } from '../storage/task/row.js'
import { beingCreated, listTasks, scanTask } from '../storage/task/scan.js'
import type { TokenReport } from './tokens.js'
import type { SpendReport } from './spend-report.js'

export interface StatsFilter {
  user?: string | undefined
  /** created_at >= from */
  from?: Date | undefined
  /** created_at < to */
  to?: Date | undefined
  status?: string | undefined
}

export interface StatsReport {
  total: number
  by_location: Record<Location, number>
  by_status: Record<string, number>
  disk: { running: number; paused: number; completed: number; completed_before_gzip: number; total: number }
  averages: { messages: number; tokens: number; duration_ms: number | null; compressions: number }
  by_user: { user: string | null; tasks: number; share: number; tokens: number; average_duration_ms: number | null }[]
  /** Prompt/completion/cached split and the optional cost (config pricing): filled by collectTokens. */
  tokens?: TokenReport
  /** Spend per user per day and against the caps (spend-report.ts); absent without an index (the only record of spend). */
  spend?: SpendReport
  /** Where the figures came from: the index, or a scan of the directories when it is missing. */
  source: 'tasks.db' | 'postgresql' | 'scan'
}

interface Where {
  sql: string
  params: unknown[]
}

/** The SQL filter of `stats` (and `list`): user, status, created_at range. */
export function where(filter: StatsFilter): Where {
  const parts: string[] = []
  const params: unknown[] = []
  if (filter.user !== undefined) parts.push('user = ?'), params.push(filter.user)
  if (filter.status !== undefined) parts.push('status = ?'), params.push(filter.status)
  if (filter.from !== undefined) parts.push('created_at >= ?'), params.push(filter.from.toISOString())
  if (filter.to !== undefined) parts.push('created_at < ?'), params.push(filter.to.toISOString())
  return { sql: parts.length ? `WHERE ${parts.join(' AND ')}` : '', params }
}

const DURATION_MS = `(julianday(completed_at) - julianday(COALESCE(started_at, created_at))) * 86400000.0`

/**
 * Totals, disk use, averages and the per-user table (docs/contract.md §9) from tasks.db.
 * Disk use of settled tasks comes from the index (measured when they settled, or
 * now, once, when it is unknown); running and paused tasks are measured live.
 */
export function collectStats(index: TaskIndex, layout: Layout, filter: StatsFilter, source: StatsReport['source']): StatsReport {
  const w = where(filter)
  const db = index.db
  const total = (db.prepare(`SELECT COUNT(*) AS n FROM tasks ${w.sql}`).get(...w.params) as { n: number }).n
  const by_location = Object.fromEntries(LOCATIONS.map((l) => [l, 0])) as Record<Location, number>
  for (const r of db.prepare(`SELECT location, COUNT(*) AS n FROM tasks ${w.sql} GROUP BY location`).all(...w.params) as { location: Location; n: number }[]) {
    by_location[r.location] = r.n
  }
  const by_status: Record<string, number> = {}
  for (const r of db.prepare(`SELECT status, COUNT(*) AS n FROM tasks ${w.sql} GROUP BY status ORDER BY status`).all(...w.params) as {
    status: string
    n: number
  }[]) {
    by_status[r.status] = r.n
  }
  const avg = db
    .prepare(
      `SELECT AVG(total_messages) AS messages, AVG(total_tokens) AS tokens, AVG(compression_count) AS compressions,
              AVG(CASE WHEN completed_at IS NOT NULL THEN ${DURATION_MS} END) AS duration
       FROM tasks ${w.sql}`,
    )
    .get(...w.params) as { messages: number | null; tokens: number | null; compressions: number | null; duration: number | null }
  const users = db
    .prepare(
      `SELECT user, COUNT(*) AS tasks, SUM(total_tokens) AS tokens, AVG(CASE WHEN completed_at IS NOT NULL THEN ${DURATION_MS} END) AS duration
       FROM tasks ${w.sql} GROUP BY user ORDER BY tasks DESC, user`,
    )
    .all(...w.params) as { user: string | null; tasks: number; tokens: number | null; duration: number | null }[]
  return {
    total,
    by_location,
    by_status,
    disk: diskUse(index, layout, w),
    averages: {
      messages: round(avg.messages ?? 0, 1),
      tokens: Math.round(avg.tokens ?? 0),
      duration_ms: avg.duration === null ? null : Math.round(avg.duration),
      compressions: round(avg.compressions ?? 0, 2),
    },
    by_user: users.map((u) => ({
      user: u.user,
      tasks: u.tasks,
      share: total ? round(u.tasks / total, 4) : 0,
      tokens: u.tokens ?? 0,
      average_duration_ms: u.duration === null ? null : Math.round(u.duration),
    })),
    source,
  }
}

function diskUse(index: TaskIndex, layout: Layout, w: Where): StatsReport['disk'] {
  const disk = { running: 0, paused: 0, completed: 0, completed_before_gzip: 0, total: 0 }
  const and = w.sql ? `${w.sql} AND` : 'WHERE'
  const live = index.db.prepare(`SELECT uuid, location FROM tasks ${and} location != 'completed'`).all(...w.params) as { uuid: string; location: Location }[]
  for (const row of live) disk[row.location as 'running' | 'paused'] += taskDiskUse(layout.taskDir(row.location, row.uuid)).bytes
  const unknown = index.db.prepare(`SELECT uuid FROM tasks ${and} location = 'completed' AND disk_bytes IS NULL`).all(...w.params) as { uuid: string }[]
  // Measured first, written after: the walk holds no write lock on tasks.db.
  const measured = unknown.map((row) => ({ uuid: row.uuid, disk: taskDiskUse(layout.taskDir('completed', row.uuid)) }))
  let cached = true
  try {
    index.setDiskUse(measured)
  } catch {
    cached = false // a cache that cannot be written (a full disk): count what was measured all the same
  }
  const done = index.db.prepare(`SELECT SUM(disk_bytes) AS bytes, SUM(disk_bytes_raw) AS raw FROM tasks ${and} location = 'completed'`).get(...w.params) as {
    bytes: number | null
    raw: number | null
  }
  disk.completed = (done.bytes ?? 0) + (cached ? 0 : measured.reduce((sum, m) => sum + m.disk.bytes, 0))
  disk.completed_before_gzip = (done.raw ?? 0) + (cached ? 0 : measured.reduce((sum, m) => sum + m.disk.raw, 0))
  disk.total = disk.running + disk.paused + disk.completed
  return disk
}

/** An in-memory index built by scanning the directories, for when tasks.db is missing. */
export async function scanIntoMemory(layout: Layout): Promise<{ index: TaskIndex; unreadable: { uuid: string; error: string }[] }> {
  const index = TaskIndex.open(':memory:')
  const rows = []
  const unreadable: { uuid: string; error: string }[] = []
  for (const ref of listTasks(layout)) {
    const scanned = await scanTask(ref)
    if (scanned.ok) rows.push(taskRow(scanned.task.metadata, scanned.task.state, ref.location, scanned.task.counts))
    else if (!beingCreated(ref)) unreadable.push({ uuid: ref.uuid, error: scanned.error })
  }
  index.replaceAll(rows)
  return { index, unreadable }
}

export type Level = 'ok' | 'warning' | 'critical'

export interface Alert {
  level: Exclude<Level, 'ok'>
  metric: 'disk' | 'failure_rate' | 'running_tasks' | 'long_running' | 'free_space' | 'queue_no_worker' | 'queue_wait' | 'pass_lease' | 'budget'
  value: number
  threshold: number
  message: string
}

export interface CheckResult {
  status: Level
  alerts: Alert[]
  summary: string
}

const GB = 1024 ** 3

/** The alerts of docs/contract.md §9, with thresholds from config `alerts`. */
export function checkHealth(report: StatsReport, index: TaskIndex, layout: Layout, config: Config, now: Date): CheckResult {
  const running = index.db.prepare(`SELECT uuid, started_at, created_at FROM tasks WHERE location = 'running'`).all() as RunningRow[]
  return checkAlerts(report, running, layout, config, now)
}

export interface RunningRow {
  uuid: string
  started_at: string | null
  created_at: string
}

/** checkHealth's alerts from the figures they need and the tasks in running/ (serve's /metrics reads these from the index's totals). */
export function checkAlerts(
  report: Pick<StatsReport, 'total' | 'by_location' | 'by_status'> & { disk: { total: number } },
  rows: readonly RunningRow[],
  layout: Layout,
  config: Config,
  now: Date,
): CheckResult {
  const a = config.alerts
  const alerts: Alert[] = []
  const gb = report.disk.total / GB
  if (gb > a.disk_critical_gb)
    alerts.push({
      level: 'critical',
      metric: 'disk',
      value: gb,
      threshold: a.disk_critical_gb,
      message: `disk use ${gb.toFixed(1)} GB > ${a.disk_critical_gb} GB`,
    })
  else if (gb > a.disk_warning_gb)
    alerts.push({
      level: 'warning',
      metric: 'disk',
      value: gb,
      threshold: a.disk_warning_gb,
      message: `disk use ${gb.toFixed(1)} GB > ${a.disk_warning_gb} GB`,
    })
  const finished = (report.by_status.completed ?? 0) + (report.by_status.failed ?? 0) + (report.by_status.timeout ?? 0)
  const failed = (report.by_status.failed ?? 0) + (report.by_status.timeout ?? 0)
  const rate = finished ? failed / finished : 0
  if (rate > a.failure_rate) {
    alerts.push({
      level: 'warning',
      metric: 'failure_rate',
      value: round(rate, 4),
      threshold: a.failure_rate,
      message: `failure rate ${(rate * 100).toFixed(1)}% > ${(a.failure_rate * 100).toFixed(0)}% (${failed} of ${finished} finished tasks)`,
    })
  }
  const running = report.by_location.running
  if (running > a.max_running_tasks) {
    alerts.push({
      level: 'warning',
      metric: 'running_tasks',
      value: running,
      threshold: a.max_running_tasks,
      message: `${running} tasks in running/ > ${a.max_running_tasks}`,
    })
  }
  const limitMs = a.long_running_hours * 3_600_000
  const long = rows.filter((r) => {
    const since = Date.parse(readLock(layout.taskDir('running', r.uuid))?.info?.acquired_at ?? r.started_at ?? r.created_at)
    return !Number.isNaN(since) && now.getTime() - since > limitMs
  })
  if (long.length > 0) {
    alerts.push({
      level: 'warning',
      metric: 'long_running',
      value: long.length,
      threshold: a.long_running_hours,
      message: `${long.length} task(s) running longer than ${a.long_running_hours}h: ${long
        .slice(0, 5)
        .map((r) => r.uuid.slice(0, 8))
        .join(', ')}${long.length > 5 ? ', …' : ''}`,
    })
  }
  const free = freeSpace(layout.base)
  if (free !== null) {
    const pct = round(free.percent, 1)
    const message = `${pct}% free (${(free.bytes / GB).toFixed(2)} GB) on the device holding ${layout.base}`
    if (free.percent < a.free_critical_percent)
      alerts.push({
        level: 'critical',
        metric: 'free_space',
        value: pct,
        threshold: a.free_critical_percent,
        message: `${message} < ${a.free_critical_percent}%`,
      })
    else if (free.percent < a.free_warning_percent)
      alerts.push({ level: 'warning', metric: 'free_space', value: pct, threshold: a.free_warning_percent, message: `${message} < ${a.free_warning_percent}%` })
  }
  const status: Level = alerts.some((x) => x.level === 'critical') ? 'critical' : alerts.length ? 'warning' : 'ok'
  const summary = `${report.total} tasks, ${running} running, failure rate ${(rate * 100).toFixed(1)}%, disk ${gb.toFixed(2)} GB`
  return { status, alerts, summary }
}

/** Space an unprivileged writer can still use on the device holding `path`, or null where it cannot be asked. */
function freeSpace(path: string): { bytes: number; percent: number } | null {
  try {
    const s = statfsSync(path)
    if (s.blocks === 0) return null
    return { bytes: s.bavail * s.bsize, percent: (100 * s.bavail) / s.blocks }
  } catch {
    return null
  }
}

function round(n: number, digits: number): number {
  const f = 10 ** digits
  return Math.round(n * f) / f
}
