import { statSync } from 'node:fs'
import { join } from 'node:path'
import { isErrno } from '../errors.js'
import { appendInbox, readInbox } from '../storage/task/inbox.js'
import type { ControlAction, InboxRecord } from '../storage/task/inbox.js'
import { FILES, LOCATIONS } from '../storage/fs/layout.js'
import { fileSize } from '../storage/task/reader.js'
import type { Layout, Location, TaskRef } from '../storage/fs/layout.js'

export type Reply = Extract<InboxRecord, { kind: 'reply' }>

export interface AskResult {
  /** The owner's reply, or null when it did not answer in time. */
  reply: Reply | null
  /** Where the task is now (a pause moves it to paused/). */
  location: Location | null
  /** False when the task had left running/ before the request could be written: no one was asked. */
  sent: boolean
}

const POLL_MS = 100

/**
 * Asks a task's running owner to act (docs/contract.md §12.6): appends a control request to its
 * inbox.jsonl (one write; the only file another process may write in an owned task)
 * and waits up to `waitMs` for the owner's reply, and for a pause or an end until the
 * task has left running/. Works across hosts that share the tree: it reads only files.
 */
export async function askOwner(layout: Layout, ref: TaskRef, action: ControlAction, sender: string, waitMs: number, now: () => Date): Promise<AskResult> {
  const inbox = join(ref.dir, FILES.inbox)
  const from = fileSize(inbox) ?? 0
  let request: InboxRecord
  try {
    request = appendInbox(ref.dir, { kind: 'control', action, sender }, now())
  } catch (err) {
    // The task finished or paused between the caller's look and this write: its directory, inbox
    // and all, is in completed/ or paused/ now. Said as where it is, not as a missing lock file.
    const location = isErrno(err, 'ENOENT') ? locate(layout, ref.uuid) : 'running'
    if (location === 'running') throw err
    return { reply: null, location, sent: false }
  }
  const deadline = Date.now() + waitMs
  let reply: Reply | null = null
  let offset = from
  for (;;) {
    const location = locate(layout, ref.uuid)
    if (reply === null && location !== null) {
      const read = readInbox(layout.taskDir(location, ref.uuid), location === 'running' ? offset : from)
      if (location === 'running') offset = read.offset
      reply = read.records.find((r): r is Reply => r.kind === 'reply' && r.request_id === request.id) ?? null
    }
    // pause and end are done when the task has left running/; compress when the owner answered, or
    // left running/ (finished or paused) without answering: no one is left to answer.
    const settled = location !== 'running' || (action === 'compress' && reply !== null)
    if (settled || Date.now() >= deadline) return { reply, location, sent: true }
    await new Promise((resolve) => setTimeout(resolve, POLL_MS))
  }
}

/** Where a task is now, or null when it is gone. */
export function locate(layout: Layout, uuid: string): Location | null {
  for (const location of LOCATIONS) {
    try {
      if (statSync(layout.taskDir(location, uuid)).isDirectory()) return location
    } catch {
      // not there
    }
  }
  return null
}
