import { closeSync, openSync, readSync, statSync } from 'node:fs'
import { join } from 'node:path'
import { appendInbox } from '../storage/task/inbox.js'
import type { InboxRecord } from '../storage/task/inbox.js'
import { FILES } from '../storage/fs/layout.js'
import type { Layout, Location } from '../storage/fs/layout.js'
import { normalizeMessage } from '../storage/format/records.js'
import { fileSize } from '../storage/task/reader.js'
import { locate } from './control.js'
import type { StoredMessage } from '../storage/format/records.js'

export type Sent = Extract<InboxRecord, { kind: 'message' }>

/** What became of a message: its reply, or why there is none (yet). */
export type ReplyOutcome = { kind: 'reply'; message: StoredMessage } | { kind: 'left'; location: Location | null } | { kind: 'timeout' }

/** Appends a chat message to the task's inbox; returns it with its id and where messages.jsonl stood. */
export function sendChatMessage(dir: string, sender: string, content: string, now: Date): { record: Sent; from: number } {
  const from = fileSize(join(dir, FILES.messages)) ?? 0
  const record = appendInbox(dir, { kind: 'message', sender, content }, now) as Sent
  return { record, from }
}

const POLL_MS = 25

/**
 * Waits for the reply to an inbox message: the first assistant message without tool
 * calls after the user message that carries its `inbox_id` (docs/contract.md §6). Reads only
 * what messages.jsonl gained since the message was sent. Gives up when the task
 * leaves running/ (paused or finished) or after `timeoutMs`.
 */
export async function waitForReply(
  layout: Layout,
  uuid: string,
  inboxId: string,
  from: number,
  timeoutMs: number,
  signal?: AbortSignal,
): Promise<ReplyOutcome> {
  const deadline = Date.now() + timeoutMs
  let position = from
  let pending = ''
  let seen = false
  for (;;) {
    const location = locate(layout, uuid)
    if (location !== null) {
      const path = join(layout.taskDir(location, uuid), FILES.messages)
      const chunk = readFrom(path, position)
      position += chunk.length
      pending += chunk.toString('utf8')
      const lines = pending.split('\n')
      pending = lines.pop() ?? ''
      for (const line of lines) {
        const message = parse(line)
        if (message === null) continue
        if (message.role === 'user' && message.inbox_id === inboxId) seen = true
        else if (seen && message.role === 'assistant' && !message.tool_calls?.length) return { kind: 'reply', message }
      }
    }
    if (location !== 'running') return { kind: 'left', location }
    if (Date.now() >= deadline || signal?.aborted) return { kind: 'timeout' }
    await new Promise((resolve) => setTimeout(resolve, POLL_MS))
  }
}

function parse(line: string): StoredMessage | null {
  try {
    return normalizeMessage(JSON.parse(line) as Record<string, unknown>)
  } catch {
    return null
  }
}

function readFrom(path: string, position: number): Buffer {
  let fd: number
  try {
    fd = openSync(path, 'r')
  } catch {
    return Buffer.alloc(0)
  }
  try {
    const size = statSync(path).size
    if (size <= position) return Buffer.alloc(0)
    const buf = Buffer.allocUnsafe(Math.min(size - position, 4 << 20))
    return buf.subarray(0, readSync(fd, buf, 0, buf.length, position))
  } finally {
    closeSync(fd)
  }
}
