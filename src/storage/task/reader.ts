import { closeSync, openSync, readFileSync, readSync, statSync } from 'node:fs'
import { join } from 'node:path'
import { isErrno } from '../../errors.js'
import { nodeZlib } from '../../lazy-builtins.js'
import { assertRegularFiles } from '../fs/files.js'
import { readJsonl, resolveDataFile, tailJsonl } from '../format/jsonl.js'
import type { JsonRecord, RecordFilter } from '../format/jsonl.js'
import { FILES } from '../fs/layout.js'
import type { Location, TaskRef } from '../fs/layout.js'
import { readLock } from '../lock/record.js'
import type { LockInfo } from '../lock/record.js'
import { readMetadata } from './metadata.js'
import type { TaskMetadata } from './metadata.js'
import { normalizeMessage, normalizeSummary } from '../format/records.js'
import type { StoredMessage, SummaryRecord } from '../format/records.js'
import { readState } from './state.js'
import type { TaskState } from './state.js'
import { countRecords } from './scan.js'

/**
 * Read-only access to one task for operators: never takes the task's lock, never
 * writes into its directory, and reads a running task's files as they are (a last
 * line being written shows up as torn and is skipped).
 */

export type RecordKind = 'messages' | 'summaries' | 'tools' | 'current' | 'planning'

const KIND_FILES: Record<RecordKind, string> = {
  messages: FILES.messages,
  summaries: FILES.summaries,
  tools: FILES.tools,
  current: FILES.current,
  planning: FILES.planning,
}

export interface Overview {
  uuid: string
  status: string
  location: Location
  metadata: TaskMetadata
  state: TaskState | null
  lock: LockInfo | null
  counts: { messages: number; summaries: number; tools: number; bad_lines: number }
  last_messages: StoredMessage[]
  /** The newest LAST_SUMMARIES summaries, oldest first (`view --summaries --all` lists every one). */
  summaries: SummaryRecord[]
  final_summary: string | null
  /** The newest LAST_WAITS waits on the provider (planning.jsonl's `wait` records), oldest first (docs/running.md#waits). */
  waits: { created_at: string; plan_content: string }[]
}

const LAST_SUMMARIES = 3
const LAST_WAITS = 5

/**
 * What `view` shows by default. Cost does not grow with the task: counts come from
 * state.json, the last messages and summaries from tail reads, never from a scan.
 */
export async function readOverview(ref: TaskRef, lastMessages = 10): Promise<Overview> {
  const metadata = readMetadata(ref.dir)
  const state = readState(ref.dir)
  // Hidden messages (visible: false, e.g. a chat session marker) are not part of the conversation shown.
  const tail = await tailJsonl(join(ref.dir, FILES.messages), lastMessages, (r) => r.visible !== false)
  // The newest summaries, read from the end: a task with thousands of them costs what one with three does.
  const lastSummaries = await tailJsonl(join(ref.dir, FILES.summaries), LAST_SUMMARIES)
  const summaries = lastSummaries.records.map(normalizeSummary).filter((r): r is SummaryRecord => r !== null)
  const bad = tail.bad.length + lastSummaries.bad.length + lastSummaries.records.length - summaries.length
  const counts = await countRecords(ref.dir, state)
  const lastWaits = await tailJsonl(join(ref.dir, FILES.planning), LAST_WAITS, (r) => r.plan_type === 'wait')
  const waits = lastWaits.records.map((r) => ({ created_at: String(r.created_at ?? ''), plan_content: String(r.plan_content ?? '') }))
  const messages = tail.records.map(normalizeMessage).filter((m): m is StoredMessage => m !== null)
  return {
    uuid: ref.uuid,
    status: state?.status ?? 'unknown',
    location: ref.location,
    metadata,
    state,
    lock: readLock(ref.dir)?.info ?? null,
    counts: {
      messages: Math.max(counts.messages, messages.at(-1)?.seq ?? 0),
      summaries: Math.max(counts.summaries, summaries.at(-1)?.summary_id ?? 0, summaries.length),
      tools: counts.tools,
      bad_lines: bad,
    },
    last_messages: messages,
    summaries,
    final_summary: readText(join(ref.dir, FILES.finalSummary)),
    waits,
  }
}

export interface ListOptions {
  /** The newest `limit` records (default 10); null for all of them. */
  limit: number | null
  /** Only messages of this role (messages and current). */
  role?: string | undefined
  /** Include messages recorded with visible: false (left out unless asked). */
  hidden?: boolean
}

export interface Listing {
  records: JsonRecord[]
  bad_lines: number
}

/** Records of one file, exactly as stored, oldest first. */
export async function listRecords(ref: TaskRef, kind: RecordKind, options: ListOptions): Promise<Listing> {
  const path = join(ref.dir, KIND_FILES[kind])
  // A link or a directory where the file should be is reported, not listed as "no records".
  assertRegularFiles(ref.dir, [KIND_FILES[kind], `${KIND_FILES[kind]}.gz`])
  const keep: RecordFilter = (r) => (options.role === undefined || r.role === options.role) && (options.hidden === true || r.visible !== false)
  if (options.limit !== null) {
    const { records, bad } = await tailJsonl(path, options.limit, keep)
    return { records, bad_lines: bad.length }
  }
  const records: JsonRecord[] = []
  let bad = 0
  for await (const item of readJsonl(path)) {
    if (!item.ok) bad++
    else if (keep(item.record)) records.push(item.record)
  }
  return { records, bad_lines: bad }
}

/** A text file of a task (or its .gz), or null when there is none. */
export function readText(path: string): string | null {
  const file = resolveDataFile(path)
  if (file === null) return null
  const data = readFileSync(file)
  return (file.endsWith('.gz') ? nodeZlib().gunzipSync(data) : data).toString('utf8')
}

export interface FollowOptions {
  /** Resolves when following should stop early (Ctrl-C). */
  stop: Promise<void>
  pollMs?: number
  /** Where the file is now, and whether its task is still in running/. */
  locate: () => { path: string; running: boolean }
}

/**
 * New lines of a running task's JSON Lines file from byte `offset` on, as they are
 * appended, until the task leaves running/ (then the rest is read where the task
 * went) or `stop`. Polls rather than watching: inotify misses writes made on other
 * hosts of a shared filesystem.
 */
export async function* followJsonl(offset: number, options: FollowOptions): AsyncGenerator<JsonRecord> {
  let stopped = false
  void options.stop.then(() => {
    stopped = true
  })
  let position = offset
  let pending = ''
  for (;;) {
    const where = options.locate()
    const size = fileSize(where.path)
    if (size !== null && size > position) {
      const fd = openSync(where.path, 'r')
      try {
        const buf = Buffer.allocUnsafe(size - position)
        const n = readSync(fd, buf, 0, buf.length, position)
        position += n
        pending += buf.subarray(0, n).toString('utf8')
      } finally {
        closeSync(fd)
      }
      const lines = pending.split('\n')
      pending = lines.pop() ?? ''
      for (const line of lines) {
        if (line.trim() === '') continue
        try {
          yield JSON.parse(line) as JsonRecord
        } catch {
          // A bad line in the middle of a live file: skip it, as every reader does.
        }
      }
    }
    if (stopped || !where.running) return
    await Promise.race([new Promise((r) => setTimeout(r, options.pollMs ?? 500)), options.stop])
  }
}

export function fileSize(path: string): number | null {
  try {
    return statSync(path).size
  } catch (err) {
    if (isErrno(err, 'ENOENT')) return null
    throw err
  }
}
