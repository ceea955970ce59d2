import { randomUUID } from 'node:crypto'
import type { Pool } from 'pg'
import { CtxError } from '../../errors.js'
import { oneLine, quoted } from '../../sources/quote.js'
import type { OwnPull, ReviewEvent, ReviewWatch, Tracker } from '../../sources/types.js'
import { maskText } from '../../storage/format/mask.js'
import type { Layout } from '../../storage/fs/layout.js'
import { recordsDelivery } from '../../run/inheritance.js'
import { inTransaction } from '../../storage/index/pg-pool.js'
import type { JobSpec } from '../queue/job-spec.js'
import { JobQueue } from '../queue/job-queue.js'
import { withdrawWaiting } from '../queue/job-admin.js'

/** The `trigger` of a fleet_polled row made by the review loop: no poller's label (a label has no comma). */
export const REVIEW_TRIGGER = ',review'

/** The tail of one failed check's log in a statement, and the whole statement's bound. */
const LOG_TAIL_CHARS = 4_000
const STATEMENT_CHARS = 24_000

export interface ReviewOptions {
  maxRounds: number
  /** The follow-up job on one pull/merge request, with its statement. */
  spec: (ref: string, statement: string) => JobSpec
  priority: number
  signal?: AbortSignal
}

/** What one pass of the review loop did for one repository (part of a line of `poll --json`). */
export interface ReviewReport {
  /** Own open pull/merge requests watched. */
  watched: number
  followups: string[]
  /** Pull requests with new activity past deliver.max_rounds: nothing queued. */
  exhausted: string[]
  /** Merged or closed since the last pass: their rows deleted, a waiting follow-up cancelled. */
  forgotten: string[]
  errors: string[]
}

/**
 * The review loop (docs/delivery.md#the-review-loop): each open pull/merge request that
 * ctxagent opened and that has new activity from people with write access (a review
 * asking for changes, a review comment, a comment) or a failed check on its head gets one
 * follow-up job on it, at most `maxRounds` per pull request. Its row in `fleet_reviews`
 * (the rounds used and the events already answered) is held for the decision, so that
 * however many pollers run, one new event makes one follow-up. While a follow-up is still
 * waiting or running nothing more is queued: what comes meanwhile is the next round's.
 */
export async function reviewPass(pool: Pool, layout: Layout, tracker: Tracker, watch: ReviewWatch, options: ReviewOptions): Promise<ReviewReport> {
  const report: ReviewReport = { watched: 0, followups: [], exhausted: [], forgotten: [], errors: [] }
  let pulls: OwnPull[]
  try {
    // A pull request not written by the bot's account counts only when the task its marker names recorded delivering it.
    pulls = (await watch.listOwnPulls()).filter((p) => p.byBot || recordsDelivery(layout, p.opener, p))
  } catch (err) {
    if (options.signal?.aborted) throw options.signal.reason
    report.errors.push((err as Error).message)
    return report
  }
  report.watched = pulls.length
  for (const pull of pulls) {
    try {
      const done = await followUp(pool, tracker, watch, pull, options)
      if (done === 'queued') report.followups.push(pull.ref)
      if (done === 'exhausted') report.exhausted.push(pull.ref)
    } catch (err) {
      if (options.signal?.aborted || !(err instanceof CtxError)) throw err
      report.errors.push(`${pull.ref}: ${err.message}`)
    }
  }
  // Only a complete listing says a pull request is gone (merged or closed): forgotten.
  const open = pulls.map((p) => p.ref)
  const gone = await pool.query<{ ref: string; task_uuid: string | null }>(
    'DELETE FROM fleet_reviews WHERE source = $1 AND NOT (ref = ANY($2)) RETURNING ref, task_uuid',
    [tracker.name, open],
  )
  for (const row of gone.rows) {
    if (row.task_uuid !== null) await withdrawWaiting(pool, row.task_uuid)
    report.forgotten.push(row.ref)
  }
  return report
}

async function followUp(pool: Pool, tracker: Tracker, watch: ReviewWatch, pull: OwnPull, options: ReviewOptions): Promise<'queued' | 'exhausted' | null> {
  const events = await watch.reviewEvents(pull)
  if (events.length === 0) return null
  const before =
    (await pool.query<{ seen: string[] }>('SELECT seen FROM fleet_reviews WHERE source = $1 AND ref = $2', [tracker.name, pull.ref])).rows[0]?.seen ?? []
  const unseen = events.filter((e) => !before.includes(e.id))
  if (unseen.length === 0) return null
  // The logs are read before the row is held (they are slow); a check another poller answered meanwhile is dropped below.
  const logs = new Map<string, string>()
  for (const event of unseen.filter((e) => e.kind === 'check')) {
    const log = await watch.checkLog(pull, event, LOG_TAIL_CHARS)
    if (log !== null) logs.set(event.id, log)
  }
  return inTransaction(pool, async (client) => {
    await client.query('INSERT INTO fleet_reviews (source, ref) VALUES ($1, $2) ON CONFLICT DO NOTHING', [tracker.name, pull.ref])
    const row = (
      await client.query<{ rounds: number; seen: string[]; task_uuid: string | null }>(
        'SELECT rounds, seen, task_uuid FROM fleet_reviews WHERE source = $1 AND ref = $2 FOR UPDATE',
        [tracker.name, pull.ref],
      )
    ).rows[0]
    if (row === undefined) return null
    const fresh = unseen.filter((e) => !row.seen.includes(e.id))
    if (fresh.length === 0) return null
    if (row.task_uuid !== null) {
      const open = await client.query(`SELECT 1 FROM fleet_jobs WHERE task_uuid = $1 AND state IN ('waiting', 'running', 'retrying')`, [row.task_uuid])
      if ((open.rowCount ?? 0) > 0) return null
    }
    const ids = fresh.map((e) => e.id)
    if (row.rounds >= options.maxRounds) {
      await client.query('UPDATE fleet_reviews SET seen = seen || $3::text[], updated_at = now() WHERE source = $1 AND ref = $2', [tracker.name, pull.ref, ids])
      return 'exhausted'
    }
    // The listing was taken before: merged or closed since, it is left (and forgotten next pass).
    const now = await tracker.current(pull.ref)
    if (now === null || !now.open) return null
    const uuid = randomUUID()
    const statement = followUpStatement(pull, fresh, logs, row.rounds + 1, options.maxRounds)
    await new JobQueue(pool).enqueue({ task_uuid: uuid, kind: 'new', spec: options.spec(pull.ref, statement), priority: options.priority }, client)
    await client.query(
      'UPDATE fleet_reviews SET rounds = rounds + 1, seen = seen || $3::text[], task_uuid = $4, updated_at = now() WHERE source = $1 AND ref = $2',
      [tracker.name, pull.ref, ids, uuid],
    )
    // Its labels follow the task as an issue's do (poll's fleet_polled row, under a trigger no poller has).
    await client.query(
      `INSERT INTO fleet_polled (source, ref, task_uuid, trigger) VALUES ($1, $2, $3, $4)
       ON CONFLICT (source, ref) DO UPDATE SET task_uuid = $3, label = NULL, trigger = $4, updated_at = now()`,
      [tracker.name, pull.ref, uuid, REVIEW_TRIGGER],
    )
    return 'queued'
  })
}

/**
 * A follow-up's task statement: what happened, in docs/contract.md §6's comment format, every word
 * from the forge quoted (a comment is data, never an instruction), masked, and bounded.
 */
export function followUpStatement(pull: OwnPull, events: readonly ReviewEvent[], logs: ReadonlyMap<string, string>, round: number, maxRounds: number): string {
  const lines = [
    `[Follow-up ${round} of at most ${maxRounds} on ${oneLine(pull.ref)}, branch ${oneLine(pull.branch)}]: new review activity and check results on this pull request since the last round.`,
    'Address what is asked where it is right to, on this branch; when you finish, your changes are pushed to the pull request as one more commit and your answer is posted there.',
    '',
  ]
  const comments = events.filter((e) => e.kind !== 'check')
  if (comments.length > 0) {
    lines.push(comments.length === 1 ? '[New Comment]:' : '[New Comments Detected]:')
    comments.forEach((c, i) => {
      const what =
        c.kind === 'changes_requested'
          ? 'review requesting changes'
          : c.kind === 'review_comment'
            ? `review comment${c.path ? ` on ${oneLine(c.path)}` : ''}`
            : 'comment'
      lines.push(
        `Comment ${i + 1} from @${oneLine(c.author)}${c.at ? ` (${oneLine(c.at)})` : ''}, ${what}:`,
        quoted(c.body.trim() === '' ? '(no text)' : c.body),
        '',
      )
    })
  }
  for (const check of events.filter((e) => e.kind === 'check')) {
    lines.push(`[Failed check: ${oneLine(check.author)}]:`, quoted(check.body.trim() === '' ? '(no description)' : check.body))
    const log = logs.get(check.id)
    if (log !== undefined) lines.push(`The end of its log:`, quoted(log))
    lines.push('')
  }
  const text = maskText(lines.join('\n').trim())
  return text.length > STATEMENT_CHARS ? `${text.slice(0, STATEMENT_CHARS)}\n[… cut to ${STATEMENT_CHARS} characters]` : text
}
