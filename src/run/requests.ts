import type { CompactionResult } from '../context/compaction.js'
import type { Comment } from '../sources/types.js'
import { appendInbox, readInbox } from '../storage/task/inbox.js'
import type { InboxRecord } from '../storage/task/inbox.js'
import type { TaskHandle } from '../storage/task/handle.js'
import { formatComments } from './comments.js'
import type { Ending } from './ending.js'
import type { RunLog } from './log.js'
import type { RemoteLink } from './remote.js'

export type ControlRequest = Extract<InboxRecord, { kind: 'control' }>

export interface RequestParts {
  handle: TaskHandle
  log: RunLog
  now: () => Date
  /** The task's issue or MR, whose new comments join the inbox's (GitHub and GitLab tasks). */
  remote?: RemoteLink
  /** Compacts the window now, for a `compress` request; else says why nothing was compressed. */
  compress: (requestId: string) => Promise<CompactionResult | { why: string }>
}

/**
 * What others ask of a running task through its inbox.jsonl (docs/contract.md §6, §12.6): comments
 * and chat messages, and control requests (pause, compress, end), each acted on once.
 * The position in the inbox is saved with the task's counters, so a resumed task
 * never sees a line twice.
 */
export class InboxRequests {
  /** Control requests acted on (or answered already, as the inbox shows): each is acted on once. */
  private readonly claimed = new Set<string>()
  /**
   * Where inbox.jsonl ended when this run began (took the task). A pause request before it
   * was made for an earlier run (that run paused, or died): it is answered and dropped,
   * never allowed to pause the resumed task at once (issue 19). No clock is compared: the
   * position in the file says which run a request was for. One written between the moment
   * the task was taken and this loop's start (a `jobs cancel` as a fleet's agent starts) is
   * this run's: it pauses the task before its first LLM request.
   */
  private readonly earlierRunsEnd: number

  constructor(
    private readonly parts: RequestParts,
    /** Bytes of inbox.jsonl already handled. */
    public position: number,
    /** Bytes of inbox.jsonl when the task was taken (absent: now). */
    atStart?: number,
  ) {
    const now = readInbox(parts.handle.dir, position).offset
    this.earlierRunsEnd = atStart === undefined ? now : Math.min(now, Math.max(position, atStart))
  }

  /**
   * New inbox lines since the last turn: messages become one user message (docs/contract.md §6
   * format), control requests are acted on in order. Returns the ending a request
   * meant (a pause), else null.
   */
  async read(): Promise<Ending | null> {
    const { handle, log } = this.parts
    const { records, ends, offset, bad, tooLong } = readInbox(handle.dir, this.position)
    if (bad > 0) log.warn(`inbox.jsonl: skipped ${bad} unreadable line(s)`)
    this.noteReplies(records)
    if (tooLong > 0) log.warn(`inbox.jsonl: refused ${tooLong} line(s) over 1 MiB: not added to the conversation`)
    let comments: Comment[] = this.parts.remote ? await this.parts.remote.poll(this.parts.now()) : []
    // The first batch may hold the comments: the log says where each came from.
    let fromRemote = comments.length
    const flush = () => {
      if (comments.length === 0) return
      handle.addMessage({ role: 'user', content: formatComments(comments) })
      const inbox = comments.length - fromRemote
      const where = [fromRemote > 0 ? `${fromRemote} from ${this.parts.remote?.name ?? 'the issue'}` : '', inbox > 0 ? `${inbox} from the inbox` : '']
        .filter(Boolean)
        .join(' and ')
      log.info(`${comments.length} new comment(s) added to the conversation (${where})`)
      comments = []
      fromRemote = 0
    }
    // In order, so that a pause leaves what came after it for the resumed task.
    for (const [i, record] of records.entries()) {
      if (record.kind === 'message' && record.visible !== false) comments.push({ author: record.sender, body: record.content, created_at: record.created_at })
      if (record.kind !== 'control') continue
      flush()
      if (record.action === 'pause' && (ends[i] as number) <= this.earlierRunsEnd) {
        // Answered already (by the run it was for, which paused on it): nothing to say again.
        if (!this.claim(record.id)) continue
        this.reply(record, true, 'the task paused since this request was made; dropped (pause again to pause this run)')
        log.info(`dropped a pause request by ${record.sender} made for an earlier run`)
        continue
      }
      const ending =
        record.action === 'end'
          ? this.refuse(record, 'this task is not a chat session; there is nothing to end (use ctxagent pause)')
          : await this.control(record)
      if (ending) {
        this.position = ends[i] as number
        return ending
      }
    }
    flush()
    this.position = offset
    // Saved now, not at the end of the turn: a crash during the turn must not add these comments again.
    if (records.length > 0) await handle.update({ inbox_offset: offset })
    return null
  }

  /** Acts on a pause or compress request, once, and answers it in the inbox. */
  async control(request: ControlRequest): Promise<Ending | null> {
    const { log } = this.parts
    if (!this.claim(request.id)) return null
    if (request.action === 'pause') {
      this.reply(request, true, 'pausing')
      log.info(`pause requested by ${request.sender}`)
      return { kind: 'paused', cause: 'pause', error: null }
    }
    if (request.action === 'compress') {
      const result = await this.parts.compress(request.id)
      this.reply(
        request,
        !('why' in result),
        'why' in result
          ? `nothing was compressed: ${result.why}`
          : `summary ${result.record.summary_id}: window ${result.tokensBefore} → ${result.tokensAfter} tokens`,
      )
      return null
    }
    return null
  }

  /** Requests these records answer were acted on already (by the pause watch, perhaps before a resume): never again. */
  noteReplies(records: readonly InboxRecord[]): void {
    for (const r of records) if (r.kind === 'reply') this.claimed.add(r.request_id)
  }

  private claim(id: string): boolean {
    if (this.claimed.has(id)) return false
    this.claimed.add(id)
    return true
  }

  /**
   * Watches the inbox (new bytes only, every `everyMs`) while the loop is busy: a pause
   * request is answered and `onPause` stops the task at once, so that a long LLM
   * request, tool or MCP start-up ends now instead of after the turn. Returns the canceller.
   */
  watchForPause(onPause: () => void, everyMs = 1000): () => void {
    let scanned = this.position
    const timer = setInterval(() => {
      let batch
      try {
        batch = readInbox(this.parts.handle.dir, Math.max(scanned, this.position))
      } catch {
        return // the next look, or the loop itself, sees it
      }
      scanned = batch.offset
      this.noteReplies(batch.records)
      const pause = batch.records.find((r): r is ControlRequest => r.kind === 'control' && r.action === 'pause' && !this.claimed.has(r.id))
      if (pause === undefined || !this.claim(pause.id)) return
      this.reply(pause, true, 'pausing')
      this.parts.log.info(`pause requested by ${pause.sender}; stopping what is in flight`)
      onPause()
    }, everyMs)
    timer.unref()
    return () => clearInterval(timer)
  }

  /** Answers a control request in the inbox, where the requester waits for it. */
  reply(request: ControlRequest, ok: boolean, message: string): void {
    appendInbox(this.parts.handle.dir, { kind: 'reply', request_id: request.id, action: request.action, ok, message }, this.parts.now())
  }

  private refuse(request: ControlRequest, why: string): null {
    this.reply(request, false, why)
    return null
  }
}
