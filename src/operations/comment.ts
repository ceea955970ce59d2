import { CtxError, isErrno, UsageError } from '../errors.js'
import { resolveTask } from '../storage/fs/layout.js'
import type { Layout, TaskRef } from '../storage/fs/layout.js'
import { appendInbox } from '../storage/task/inbox.js'
import { grouped } from '../text.js'

/** The longest comment taken (`ctxagent comment`, the page's comment action). */
export const MAX_COMMENT = 100_000

/**
 * Appends an operator's comment to a task's inbox (docs/contract.md §6): refused when empty, too
 * long, or the task is finished; a task that moved (paused or resumed) between finding
 * it and writing is found again, once. Returns where the comment went and its record.
 */
export function addComment(layout: Layout, start: TaskRef, text: string, sender: string, now: Date): { ref: TaskRef; record: ReturnType<typeof appendInbox> } {
  if (text.trim() === '') throw new UsageError('the comment is empty', 'say something')
  if (text.length > MAX_COMMENT) throw new UsageError(`the comment is ${grouped(text.length)} characters`, `keep it under ${grouped(MAX_COMMENT)}`)
  let ref = start
  const append = () => {
    if (ref.location === 'completed')
      throw new CtxError(`task ${ref.uuid} is finished (in completed/); no agent will read the comment`, {
        exitCode: 4,
        hint: 'start a new task with the same --task-id to continue from its summary',
      })
    return appendInbox(ref.dir, { kind: 'message', sender, content: text }, now)
  }
  try {
    return { ref, record: append() }
  } catch (err) {
    if (!isErrno(err, 'ENOENT')) throw err
    ref = resolveTask(layout, ref.uuid)
    return { ref, record: append() }
  }
}
