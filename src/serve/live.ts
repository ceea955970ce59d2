import { closeSync, openSync, readSync } from 'node:fs'
import { join } from 'node:path'
import type { IncomingMessage, ServerResponse } from 'node:http'
import type { CommandEnv } from '../command-env.js'
import { FILES, resolveTask } from '../storage/fs/layout.js'
import type { TaskRef } from '../storage/fs/layout.js'
import type { JsonRecord } from '../storage/format/jsonl.js'
import { fileSize, followJsonl } from '../storage/task/reader.js'
import { messageView } from './message-view.js'

/** How often the tail of messages.jsonl is looked at: a stat, and a read of what was appended. */
const POLL_MS = 100
/** A comment to every follower this often: a connection whose peer went away is found and closed. */
const KEEPALIVE_MS = 15_000
/** A follower whose socket has taken nothing for this long (it never reads) is dropped. */
const STALL_MS = 60_000
/** …and so is one with more than this waiting unsent. */
const MAX_UNSENT = 1 << 20
/** What a refused follower is told to wait before it tries again (Retry-After, seconds). */
const RETRY_AFTER_S = 30

/** serve.max_followers_per_task and serve.max_followers (docs/serve.md#live-followers). */
export interface FollowLimits {
  perTask: number
  total: number
}

interface Follower {
  res: ServerResponse
  /** The seq of the last message sent (or the page had): a message is sent once. */
  lastSeq: number
  /** When a write last found the socket full, until it drains. */
  stalledSince: number | null
  gone: boolean
}

/** One task's tail, read once for all who follow it. */
interface Watch {
  uuid: string
  followers: Set<Follower>
  stopping: boolean
  stop: () => void
}

/**
 * Running tasks' new messages as Server-Sent Events, each its MessageView (message-view.ts, the
 * view the page's own rendering is built from) (docs/serve.md#live-followers): ONE
 * watcher per task (`followJsonl`, the tailing code `view --follow` uses, reading only what
 * was appended) whose messages go to every follower of the task; at most `perTask`
 * followers of one task and `total` in all (past either: 503 with Retry-After); a
 * keepalive comment every 15 s, and a follower that reads nothing is dropped (60 s
 * without draining, or 1 MiB unsent).
 */
export class LiveFollowers {
  private readonly watches = new Map<string, Watch>()
  private readonly all = new Set<Follower>()
  private refusedCount = 0
  private readonly timer: NodeJS.Timeout

  constructor(
    private readonly ctx: CommandEnv,
    private readonly limits: FollowLimits,
    private readonly now: () => number = Date.now,
  ) {
    this.timer = setInterval(() => this.keepalive(), KEEPALIVE_MS)
    this.timer.unref()
  }

  /** Followers connected, watchers reading, and followers refused since start (for /metrics). */
  counts(): { followers: number; watchers: number; refused: number } {
    return { followers: this.all.size, watchers: this.watches.size, refused: this.refusedCount }
  }

  /**
   * Streams a running task's messages from byte `offset` of its messages.jsonl (where the
   * page read up to), skipping seq ≤ `after` (or the browser's Last-Event-ID); ends with an
   * `end` event naming where the task went when it leaves running/, or when the browser goes
   * away. Resolves once the follower is gone.
   */
  follow(ref: TaskRef, req: IncomingMessage, res: ServerResponse, offset: number, after: number, headers: Record<string, string>): Promise<void> {
    const live = this.watches.get(ref.uuid)
    const watch = live !== undefined && !live.stopping ? live : null
    if (this.all.size >= this.limits.total || (watch?.followers.size ?? 0) >= this.limits.perTask) {
      this.refusedCount++
      const which =
        this.all.size >= this.limits.total
          ? `${this.limits.total} live followers in all (serve.max_followers)`
          : `${this.limits.perTask} live followers of this task (serve.max_followers_per_task)`
      res.writeHead(503, { ...headers, 'content-type': 'text/plain; charset=utf-8', 'retry-after': String(RETRY_AFTER_S), connection: 'close' })
      res.end(`serve has ${which} already; try again later\n`)
      return Promise.resolve()
    }
    const resumeAfter = Number(req.headers['last-event-id'])
    const follower: Follower = { res, lastSeq: Number.isSafeInteger(resumeAfter) && resumeAfter > after ? resumeAfter : after, stalledSince: null, gone: false }
    res.writeHead(200, { ...headers, 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-store', 'x-accel-buffering': 'no' })
    res.write('retry: 2000\n\n')
    res.on('drain', () => (follower.stalledSince = null))
    // What was appended since the page read: read here once; from then on the task's watcher sends.
    const path = join(ref.dir, FILES.messages)
    const end = fileSize(path) ?? 0
    // An offset past the end (a forged one, or a file rewritten since): from the end.
    let upTo = Math.min(offset, end)
    try {
      const read = readLines(path, upTo, end)
      upTo = read.offset
      for (const record of read.records) this.send(follower, record)
    } catch {
      // Unreadable now (the task moved on): its watcher reads where it went.
    }
    const own = watch ?? this.watch(ref, upTo)
    own.followers.add(follower)
    this.all.add(follower)
    return new Promise<void>((resolve) => {
      const leave = (): void => {
        if (follower.gone) return resolve()
        follower.gone = true
        own.followers.delete(follower)
        this.all.delete(follower)
        if (own.followers.size === 0) own.stop()
        resolve()
      }
      req.on('close', leave)
      res.on('close', leave)
    })
  }

  /** Ends every stream (serve stops). */
  close(): void {
    clearInterval(this.timer)
    for (const watch of this.watches.values()) watch.stop()
    for (const follower of this.all) follower.res.destroy()
  }

  private watch(ref: TaskRef, from: number): Watch {
    let stop: () => void = () => undefined
    const stopped = new Promise<void>((resolve) => (stop = resolve))
    const watch: Watch = {
      uuid: ref.uuid,
      followers: new Set(),
      stopping: false,
      stop: () => {
        watch.stopping = true
        stop()
      },
    }
    this.watches.set(ref.uuid, watch)
    const locate = () => {
      const now = resolveTask(this.ctx.layout, ref.uuid)
      return { path: join(now.dir, FILES.messages), running: now.location === 'running' }
    }
    void (async () => {
      let last: string
      try {
        for await (const record of followJsonl(from, { stop: stopped, locate, pollMs: POLL_MS })) {
          for (const follower of watch.followers) this.send(follower, record)
        }
        last = `event: end\ndata: ${resolveTask(this.ctx.layout, ref.uuid).location}\n\n`
      } catch (err) {
        last = `event: end\ndata: unreadable (${JSON.stringify((err as Error).message)})\n\n`
      }
      watch.stopping = true
      if (this.watches.get(ref.uuid) === watch) this.watches.delete(ref.uuid)
      for (const follower of [...watch.followers]) {
        if (!follower.res.destroyed) follower.res.write(last)
        follower.res.end()
      }
    })()
    return watch
  }

  private send(follower: Follower, record: JsonRecord): void {
    const seq = typeof record.seq === 'number' ? record.seq : null
    if ((seq !== null && seq <= follower.lastSeq) || record.visible === false || follower.res.destroyed) return
    if (seq !== null) follower.lastSeq = seq
    this.write(follower, `${seq === null ? '' : `id: ${seq}\n`}data: ${JSON.stringify(messageView(record))}\n\n`)
  }

  private write(follower: Follower, text: string): void {
    if (follower.res.write(text)) return
    follower.stalledSince ??= this.now()
    if (follower.res.writableLength > MAX_UNSENT) follower.res.destroy()
  }

  private keepalive(): void {
    const now = this.now()
    for (const follower of this.all) {
      if (follower.stalledSince !== null && (now - follower.stalledSince >= STALL_MS || follower.res.writableLength > MAX_UNSENT)) follower.res.destroy()
      else this.write(follower, ': keepalive\n\n')
    }
  }
}

/** The complete lines of a JSON Lines file from byte `from` to `to` (bad lines skipped), and the offset after the last. */
function readLines(path: string, from: number, to: number): { records: JsonRecord[]; offset: number } {
  if (to <= from) return { records: [], offset: from }
  const fd = openSync(path, 'r')
  let buf: Buffer
  try {
    buf = Buffer.allocUnsafe(to - from)
    buf = buf.subarray(0, readSync(fd, buf, 0, buf.length, from))
  } finally {
    closeSync(fd)
  }
  const complete = buf.lastIndexOf(0x0a) + 1
  const records: JsonRecord[] = []
  for (const line of buf.subarray(0, complete).toString('utf8').split('\n')) {
    try {
      if (line.trim() !== '') records.push(JSON.parse(line) as JsonRecord)
    } catch {
      // as every reader does: a bad line is skipped
    }
  }
  return { records, offset: from + complete }
}
