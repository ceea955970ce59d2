import type { Channel } from '../sources/types.js'
import { isOwn, withMarker } from '../sources/marker.js'
import type { TaskState } from '../storage/task/state.js'
import type { Comment } from '../sources/types.js'
import type { RunLog } from './log.js'
import { maskText } from '../storage/format/mask.js'
import { untilAborted } from '../abort.js'
import { attemptOf, setupFailedComment } from './environment-step.js'
import type { SetupFailure } from './environment-step.js'

type Detection = TaskState['comment_detection']

/**
 * A task's link to its GitHub issue or GitLab MR while it runs: one status comment,
 * edited at milestones, an outcome comment at the end, and new comments found by id
 * (docs/contract.md §6) at most every `min_interval`. What it has seen lives in state.json, so a
 * resumed task sees nothing twice. Every failure to talk to the server is a warning:
 * the task never fails for it. Every comment is masked here, as it leaves: secrets and
 * addresses never reach a public issue, whatever the text was built from.
 */
export class RemoteLink {
  private readonly seen: Set<string>
  /**
   * The highest numeric comment id seen. GitHub and GitLab number comments in the order
   * they are made, so anything at or below it is old, however many there are: the id
   * list in state.json is capped, and GitLab has no `since` to narrow what it returns.
   */
  private highWater: number | null
  private lastCheck: string | null
  private lastPoll = 0
  private statusId: string | null

  constructor(
    private readonly channel: Channel,
    private readonly uuid: string,
    private readonly log: RunLog,
    private readonly minIntervalMs: number,
    detection: Detection,
    /** The task's stop (SIGINT, SIGTERM, --timeout, a lost lock): a poll under way is dropped at once. */
    private readonly stop?: AbortSignal,
  ) {
    this.seen = new Set(detection.last_comment_ids)
    // A task saved before the mark existed: its id list gives one.
    this.highWater = highest(detection.last_comment_id ?? null, detection.last_comment_ids)
    this.lastCheck = detection.last_check_timestamp
    this.statusId = detection.status_comment_id ?? null
    if (channel.botName === null)
      log.warn(`no bot_name is configured for ${channel.name}: new comments are not read while the task runs (set github.bot_name or gitlab.bot_name)`)
  }

  /** The issue's name, e.g. acme/shop#42 (for log lines). */
  get name(): string {
    return this.channel.name
  }

  /** For state.json: the high-water mark, seen ids (the newest 1,000, for ids that are not numbers), last check, the status comment. */
  detection(): Detection {
    return {
      last_comment_ids: [...this.seen].slice(-1000),
      last_comment_id: this.highWater,
      last_check_timestamp: this.lastCheck,
      status_comment_id: this.statusId,
    }
  }

  /** Posts the status comment, or edits it when a resumed task already has one. */
  async status(text: string): Promise<void> {
    const body = maskText(withMarker(text, this.uuid))
    await this.quietly('update the status comment on', async (signal) => {
      if (this.statusId === null) this.statusId = await this.channel.post(body, signal)
      else await this.channel.edit(this.statusId, body, signal)
    })
  }

  /** The outcome, as a comment of its own. */
  async outcome(text: string): Promise<void> {
    await this.quietly('post the outcome on', (signal) => this.channel.post(maskText(withMarker(text, this.uuid)), signal).then(() => undefined))
  }

  /** New comments by people since the last look; none more often than the interval allows. */
  async poll(now: Date): Promise<Comment[]> {
    if (this.channel.botName === null || Date.now() - this.lastPoll < this.minIntervalMs) return []
    this.lastPoll = Date.now()
    // A margin for clocks that disagree; ids already seen are dropped anyway.
    const since = this.lastCheck === null ? null : new Date(Date.parse(this.lastCheck) - 300_000).toISOString()
    let fresh: Comment[] = []
    await this.quietly(
      'read new comments on',
      async (signal) => {
        const all = await this.channel.listComments(since, signal)
        // Answered after the call was given up: nothing is marked seen that is not returned.
        if (signal.aborted) return
        // Edited comments are not new: only ids never seen, above the mark, count.
        const mark = this.highWater
        const unseen = all.filter((c) => !this.seen.has(c.id) && !(mark !== null && isId(c.id) && Number(c.id) <= mark))
        for (const c of unseen) this.seen.add(c.id)
        this.highWater = highest(
          this.highWater,
          unseen.map((c) => c.id),
        )
        fresh = unseen.filter((c) => !isOwn(c.body, c.author, this.channel.botName))
        this.lastCheck = now.toISOString()
      },
      true,
    )
    if (fresh.length > 0) this.log.info(`${fresh.length} new comment(s) on ${this.channel.name}`)
    return fresh
  }

  private quietly(what: string, body: (signal: AbortSignal) => Promise<void>, stoppable = false): Promise<void> {
    return forgeCall(this.channel.name, this.log, what, body, stoppable ? this.stop : undefined)
  }
}

/**
 * The one comment on the issue of a task whose environment failed, before its link is
 * opened (docs/environments.md#when-setup-fails): marked and masked as every comment is,
 * bounded, a failure a warning. The bot's own comment of an earlier attempt on the same
 * base (a fleet job retried, a task run again) is edited in place with this attempt's
 * number and tail; without a bot name nothing is the bot's, and each attempt posts its own.
 */
export async function postSetupFailure(channel: Channel, log: RunLog, failure: SetupFailure, base: string): Promise<void> {
  await forgeCall(channel.name, log, 'post the outcome on', async (signal) => {
    const comments = channel.botName === null ? [] : await channel.listComments(null, signal)
    const earlier = comments.filter((c) => isOwn(c.body, c.author, channel.botName) && attemptOf(c.body)?.base === base).at(-1)
    const n = earlier === undefined ? 1 : (attemptOf(earlier.body)?.n ?? 0) + 1
    const body = maskText(withMarker(setupFailedComment(failure, { n, base }), failure.uuid))
    if (earlier === undefined) await channel.post(body, signal)
    else await channel.edit(earlier.id, body, signal)
  })
}

/**
 * One call to the forge, bounded: CALL_TIMEOUT_MS at most whatever the client waits
 * for (a rate limit, a server that does not answer), and, with `stop`, not a moment
 * past the task's stop. The status and outcome comments written while stopping are not
 * stoppable: they are what the stop is meant to leave behind.
 */
async function forgeCall(name: string, log: RunLog, what: string, body: (signal: AbortSignal) => Promise<void>, stop?: AbortSignal): Promise<void> {
  // Stopped already: nothing more is asked of the forge.
  if (stop?.aborted) return
  const signal = AbortSignal.any([AbortSignal.timeout(CALL_TIMEOUT_MS), ...(stop ? [stop] : [])])
  try {
    await untilAborted(body(signal), signal)
  } catch (err) {
    if (stop?.aborted) return
    log.warn(`could not ${what} ${name}: ${signal.aborted ? `no answer within ${CALL_TIMEOUT_MS / 1000}s` : (err as Error).message}`)
  }
}

/** The longest one call to the forge may take, waits for rate limits included. */
const CALL_TIMEOUT_MS = 10_000

function isId(id: string): boolean {
  return /^\d{1,15}$/.test(id)
}

/** The highest of a mark and the numeric ids in a list (null when there is none). */
function highest(mark: number | null, ids: readonly string[]): number | null {
  let top = mark
  for (const id of ids) if (isId(id) && (top === null || Number(id) > top)) top = Number(id)
  return top
}

/** The status comment's text: what works on the issue, which task, and where it stands. */
export function statusText(handle: { uuid: string; metadata: { inherited_from?: string | null } }, where: string): string {
  const inherited = handle.metadata.inherited_from ? `\nIt continues from task \`${handle.metadata.inherited_from}\`.` : ''
  return `**ctxagent** is working on this (task \`${handle.uuid}\`): ${where}.${inherited}`
}
