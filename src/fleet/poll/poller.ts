import { existsSync } from 'node:fs'
import { randomUUID } from 'node:crypto'
import type { Pool } from 'pg'
import type { LabelledItem, Tracker, TriggerCheck } from '../../sources/types.js'
import type { Layout } from '../../storage/fs/layout.js'
import { CtxError } from '../../errors.js'
import { inTransaction, pgReason } from '../../storage/index/pg-pool.js'
import type { JobSpec } from '../queue/job-spec.js'
import { JobQueue } from '../queue/job-queue.js'
import { withdrawWaiting } from '../queue/job-admin.js'

/** The labels `poll` sets (names in config: poll.labels). */
export interface StatusLabels {
  processing: string
  done: string
  paused: string
  failed: string
}

type Status = keyof StatusLabels | 'cancelled'

export interface PollOptions {
  /** The trigger label: open items carrying it become jobs. */
  label: string
  labels: StatusLabels
  /** The job for one item (its --github/--gitlab reference set). */
  spec: (ref: string) => JobSpec
  priority: number
  /** The poller's stop (the trackers are given it too): the pass ends at once with its reason. */
  signal?: AbortSignal
  /** Who put the trigger label on (sources.trusted: write); null: anyone's label counts (docs/delivery.md#trust). */
  trigger?: TriggerCheck | null
}

/** The fleet's database failed during a pass: the pass ends there (a loop tries again next pass). */
export class PollDatabaseError extends CtxError {
  constructor(cause: unknown) {
    super(`cannot reach the fleet's database (${pgReason(cause)})`, {
      exitCode: 1,
      hint: 'check fleet.database_url or CTXAGENT_DATABASE_URL and that the server is up',
    })
  }
}

/** What one pass did for one repository: one line of `poll --json`. */
export interface PollReport {
  source: string
  listed: number
  queued: string[]
  resumed: string[]
  cancelled: string[]
  labelled: { ref: string; label: string | null }[]
  /** Items whose trigger label was put on by someone without write access: no job (docs/delivery.md#trust). */
  untrusted: string[]
  errors: string[]
}

/**
 * One pass of the fleet's producer over one repository (docs/contract.md §14.2): each open item with
 * the trigger label and none of the status labels becomes one job, however many pollers
 * run at once (the item's row in `fleet_polled` is claimed in the job's transaction);
 * waiting jobs of items no longer listed (label taken off, closed) are cancelled; and each
 * item's status label follows its task's latest job. Every step is idempotent: a poller
 * that died half-way leaves nothing the next pass does not finish.
 *
 * A row belongs to the trigger label that made its job (`trigger`): pollers with different
 * labels over one repository each cancel and run again only their own, since an item
 * another label brought in is "not labelled" by theirs.
 */
export async function pollPass(pool: Pool, layout: Layout, tracker: Tracker, options: PollOptions): Promise<PollReport> {
  const report: PollReport = { source: tracker.name, listed: 0, queued: [], resumed: [], cancelled: [], labelled: [], untrusted: [], errors: [] }
  let items
  try {
    items = await tracker.listOpen(options.label)
  } catch (err) {
    if (options.signal?.aborted) throw options.signal.reason
    report.errors.push((err as Error).message)
    return report
  }
  try {
    await act(pool, layout, tracker, options, items, report)
  } catch (err) {
    if (options.signal?.aborted) throw options.signal.reason
    // The forge's failures are one item's (in report.errors); any other is the database's, and ends the pass.
    throw err instanceof CtxError ? err : new PollDatabaseError(err)
  }
  return report
}

async function act(pool: Pool, layout: Layout, tracker: Tracker, options: PollOptions, items: LabelledItem[], report: PollReport): Promise<void> {
  report.listed = items.length
  // Rows from before the trigger column belong to the first poller that lists their item.
  await pool.query('UPDATE fleet_polled SET trigger = $3 WHERE source = $1 AND trigger IS NULL AND ref = ANY($2)', [
    tracker.name,
    items.map((i) => i.ref),
    options.label,
  ])
  const statusNames = new Set(Object.values(options.labels))
  for (const item of items) {
    if (item.labels.some((l) => statusNames.has(l))) continue
    try {
      const taken = await take(pool, layout, tracker, item, options)
      if (taken === 'queued') report.queued.push(item.ref)
      if (taken === 'resumed') report.resumed.push(item.ref)
      if (taken === 'untrusted') report.untrusted.push(item.ref)
    } catch (err) {
      if (!isForgeError(err, options.signal)) throw err
      report.errors.push(`${item.ref}: ${(err as Error).message}`)
    }
  }
  // Only a complete listing says an item is gone (its label taken off, or closed); and only
  // a row of this poller's trigger: an item another label brought in is not this listing's to judge.
  const listed = new Set(items.map((i) => i.ref))
  const carried = new Map(items.map((i) => [i.ref, i.labels]))
  const gone = await pool.query<{ ref: string; task_uuid: string }>(
    `SELECT p.ref, p.task_uuid FROM fleet_polled p WHERE p.source = $1 AND p.trigger = $3 AND (p.label IS NULL OR p.label = 'processing') AND NOT (p.ref = ANY($2))
       AND EXISTS (SELECT 1 FROM fleet_jobs j WHERE j.task_uuid = p.task_uuid AND j.state = 'waiting')`,
    [tracker.name, [...listed], options.label],
  )
  for (const row of gone.rows) {
    // The listing was taken before: the item may have its label back (by a person, or
    // another poller queued it since). Cancelled only if it is still gone.
    let now
    try {
      now = await tracker.current(row.ref)
    } catch (err) {
      if (!isForgeError(err, options.signal)) throw err
      report.errors.push(`${row.ref}: ${(err as Error).message}`)
      continue
    }
    if (now !== null) carried.set(row.ref, now.labels)
    if (now?.open && now.labels.includes(options.label)) continue
    if (await withdrawWaiting(pool, row.task_uuid)) report.cancelled.push(row.ref)
  }
  await follow(pool, tracker, options.labels, carried, report, options.signal)
}

/** The trackers' failures are CtxErrors (one line each); the database's are pg's or the network's; a stop is neither. */
function isForgeError(err: unknown, signal: AbortSignal | undefined): boolean {
  return err instanceof CtxError && signal?.aborted !== true
}

/** Claims an item for a job in one transaction: a new task, a new run of a finished one, or the resume of a paused one. */
async function take(
  pool: Pool,
  layout: Layout,
  tracker: Tracker,
  item: LabelledItem,
  options: PollOptions,
): Promise<'queued' | 'resumed' | 'untrusted' | null> {
  const { ref } = item
  const source = tracker.name
  return inTransaction(pool, async (client) => {
    const queue = new JobQueue(pool)
    const row = (
      await client.query<{ task_uuid: string; label: string | null; trigger: string | null }>(
        'SELECT task_uuid, label, trigger FROM fleet_polled WHERE source = $1 AND ref = $2 FOR UPDATE',
        [source, ref],
      )
    ).rows[0]
    if (row === undefined) {
      if (!(await trusted(ref, options))) return 'untrusted'
      const uuid = randomUUID()
      const inserted = await client.query('INSERT INTO fleet_polled (source, ref, task_uuid, trigger) VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING', [
        source,
        ref,
        uuid,
        options.label,
      ])
      // Another poller took it first.
      if (inserted.rowCount !== 1) return null
      await queue.enqueue({ task_uuid: uuid, kind: 'new', spec: options.spec(ref), priority: options.priority }, client)
      return 'queued'
    }
    // In flight: its labels are still being set, or a person took the processing label off.
    if (row.label === null || row.label === 'processing') return null
    // Another label's item while it still carries that label: that poller runs it again, with its own flags.
    if (row.trigger !== null && row.trigger !== options.label && item.labels.includes(row.trigger)) return null
    if (row.label === 'paused' && !existsSync(layout.taskDir('paused', row.task_uuid))) return null
    // The listing was taken before: a person (or another poller) may have put a status label
    // back, taken the trigger off or closed it since. One GET, with the row held.
    if (!(await stillWanted(tracker, ref, options))) return null
    if (!(await trusted(ref, options))) return 'untrusted'
    if (row.label === 'paused') {
      // The paused label taken off: the operator wants it resumed.
      const id = await queue.enqueue({ task_uuid: row.task_uuid, kind: 'resume', spec: options.spec(ref), priority: options.priority }, client)
      await client.query(`UPDATE fleet_polled SET label = NULL, trigger = $3, updated_at = now() WHERE source = $1 AND ref = $2`, [source, ref, options.label])
      return id === null ? null : 'resumed'
    }
    // done, failed or cancelled, and its status label taken off: run it again, as a new task (it inherits the last one's summary).
    const uuid = randomUUID()
    await client.query(`UPDATE fleet_polled SET task_uuid = $3, label = NULL, trigger = $4, updated_at = now() WHERE source = $1 AND ref = $2`, [
      source,
      ref,
      uuid,
      options.label,
    ])
    await queue.enqueue({ task_uuid: uuid, kind: 'new', spec: options.spec(ref), priority: options.priority }, client)
    return 'queued'
  })
}

/** Whether the trigger label was put on by someone with write access (always, with sources.trusted: any). */
async function trusted(ref: string, options: PollOptions): Promise<boolean> {
  return options.trigger == null || (await options.trigger.labelTrusted(ref, options.label))
}

/** Whether the item is, now, open with the trigger label and none of the status labels. */
async function stillWanted(tracker: Tracker, ref: string, options: PollOptions): Promise<boolean> {
  const now = await tracker.current(ref)
  const status = new Set(Object.values(options.labels))
  return now?.open === true && now.labels.includes(options.label) && !now.labels.some((l) => status.has(l))
}

/**
 * Moves each unsettled item's status label to what its task's latest job says. Only the
 * labels an item is known to carry are taken off (GitHub spaces writes a second apart).
 */
async function follow(
  pool: Pool,
  tracker: Tracker,
  labels: StatusLabels,
  carried: Map<string, string[]>,
  report: PollReport,
  signal: AbortSignal | undefined,
): Promise<void> {
  const rows = await pool.query<{ ref: string; label: string | null; state: string | null; outcome: string | null }>(
    `SELECT p.ref, p.label, j.state, j.outcome FROM fleet_polled p
     LEFT JOIN LATERAL (SELECT state, outcome FROM fleet_jobs WHERE task_uuid = p.task_uuid ORDER BY id DESC LIMIT 1) j ON true
     WHERE p.source = $1 AND (p.label IS NULL OR p.label IN ('processing', 'paused'))`,
    [tracker.name],
  )
  for (const row of rows.rows) {
    if (row.state === null) continue
    const status = statusOf(row.state, row.outcome)
    if (status === row.label) continue
    const add = status === 'cancelled' ? null : labels[status]
    const known = carried.get(row.ref)
    const remove = Object.values(labels).filter((l) => l !== add && (known === undefined || known.includes(l)))
    if (add !== null && known?.includes(add) && remove.length === 0) {
      // Already so on the forge (set by another poller): only the row is behind.
      await pool.query(`UPDATE fleet_polled SET label = $3, updated_at = now() WHERE source = $1 AND ref = $2 AND label IS NOT DISTINCT FROM $4`, [
        tracker.name,
        row.ref,
        status,
        row.label,
      ])
      continue
    }
    try {
      await tracker.relabel(row.ref, add, remove)
      await pool.query(`UPDATE fleet_polled SET label = $3, updated_at = now() WHERE source = $1 AND ref = $2 AND label IS NOT DISTINCT FROM $4`, [
        tracker.name,
        row.ref,
        status,
        row.label,
      ])
      report.labelled.push({ ref: row.ref, label: add })
    } catch (err) {
      if (!isForgeError(err, signal)) throw err
      // Tried again next pass: the row still says the old label.
      report.errors.push(`${row.ref}: ${(err as Error).message}`)
    }
  }
}

function statusOf(state: string, outcome: string | null): Status {
  if (state === 'waiting' || state === 'running' || state === 'retrying') return 'processing'
  if (state === 'cancelled' || outcome === 'cancelled') return 'cancelled'
  if (state === 'failed') return 'failed'
  if (outcome === 'completed') return 'done'
  // A change asked for and not delivered (docs/delivery.md#what-is-recorded) is not done: someone must look.
  if (outcome === 'undelivered') return 'failed'
  if (outcome === 'paused') return 'paused'
  if (outcome === 'cancelled') return 'cancelled'
  return 'failed'
}
