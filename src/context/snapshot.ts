import { join } from 'node:path'
import { tailJsonl, visitHead } from '../storage/format/jsonl.js'
import type { JsonRecord } from '../storage/format/jsonl.js'
import { FILES } from '../storage/fs/layout.js'
import { normalizeMessage, normalizeSummary, toWindowMessage } from '../storage/format/records.js'
import type { StoredMessage, SummaryRecord, WindowMessage } from '../storage/format/records.js'

/**
 * What a task's window is made of, read from the truth (messages.jsonl and
 * summaries.jsonl) without holding the whole history: the system prompt and the
 * original task (the first lines of the file), the latest summary, and the visible
 * messages after it (read backwards from the end up to the summary).
 */
export interface ContextSnapshot {
  system: StoredMessage | null
  task: StoredMessage | null
  summary: SummaryRecord | null
  /** Visible messages after the summary (all visible messages when there is none). */
  after: StoredMessage[]
}

export async function loadSnapshot(dir: string): Promise<ContextSnapshot> {
  const { system, task } = await head(join(dir, FILES.messages))
  const summaries = await tailJsonl(join(dir, FILES.summaries), 1)
  const summary = summaries.records[0] ? normalizeSummary(summaries.records[0]) : null
  const end = summary?.end_seq ?? 0
  const { records } = await tailJsonl(
    join(dir, FILES.messages),
    Number.POSITIVE_INFINITY,
    (r) => r.visible !== false,
    (r) => typeof r.seq === 'number' && r.seq <= end,
  )
  const after = records.map(normalizeMessage).filter((m): m is StoredMessage => m !== null)
  return { system, task, summary, after: summary ? after.filter((m) => m.seq !== system?.seq && m.seq !== task?.seq) : after }
}

/** The first visible system message and the first visible user message (the task statement). */
async function head(path: string): Promise<{ system: StoredMessage | null; task: StoredMessage | null }> {
  let system: StoredMessage | null = null
  let task: StoredMessage | null = null
  /** Takes one record; true when the head is found or has been looked for far enough. */
  const visit = (record: JsonRecord): boolean => {
    if (record.visible === false) return false
    const message = normalizeMessage(record)
    if (message?.role === 'system' && system === null && task === null) system = message
    else if (message?.role === 'user') {
      task = message
      return true
    }
    // The task statement comes within the first few lines; never read far for it.
    return message !== null && message.seq > 50
  }
  await visitHead(path, visit)
  return { system, task }
}

/** The summary as it stands in the window: a user turn that says what it replaces. */
export function summaryMessage(summary: SummaryRecord): WindowMessage {
  return {
    role: 'user',
    content: `[Summary of the conversation so far (messages ${summary.start_seq}-${summary.end_seq}); the original task is above, recent messages follow]\n\n${summary.summary}`,
  }
}

/**
 * The window (current.jsonl) for a snapshot: all visible messages while there is no
 * summary; after one, the system prompt and the original task verbatim, the summary,
 * and the messages after it. Compaction and rebuild both use this, so a rebuilt
 * current.jsonl equals the maintained one.
 */
export function windowOf(snapshot: ContextSnapshot): WindowMessage[] {
  if (snapshot.summary === null) return snapshot.after.map(toWindowMessage)
  const out: WindowMessage[] = []
  if (snapshot.system) out.push(toWindowMessage(snapshot.system))
  if (snapshot.task) out.push(toWindowMessage(snapshot.task))
  out.push(summaryMessage(snapshot.summary))
  for (const m of snapshot.after) out.push(toWindowMessage(m))
  return out
}

/** current.jsonl as it should be, rebuilt from messages.jsonl and summaries.jsonl. */
export async function rebuildWindow(dir: string): Promise<WindowMessage[]> {
  return windowOf(await loadSnapshot(dir))
}
