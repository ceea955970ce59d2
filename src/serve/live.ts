import { join } from 'node:path'
import type { IncomingMessage, ServerResponse } from 'node:http'
import type { CommandEnv } from '../command-env.js'
import { FILES, resolveTask } from '../storage/fs/layout.js'
import type { TaskRef } from '../storage/fs/layout.js'
import { fileSize, followJsonl } from '../storage/task/reader.js'
import { messageView } from './message-view.js'

/** How often the tail of messages.jsonl is looked at: a stat, and a read of what was appended. */
const POLL_MS = 100
const KEEPALIVE_MS = 15_000

/**
 * A running task's new messages as Server-Sent Events (each its MessageView), from byte `offset` of its
 * messages.jsonl (where the page read up to), as `view --follow` streams them: the same
 * tailing code, reading only what was appended. Ends with an `end` event naming where
 * the task went when it leaves running/, or when the browser goes away.
 */
export async function streamMessages(ctx: CommandEnv, ref: TaskRef, req: IncomingMessage, res: ServerResponse, offset: number, after: number, headers: Record<string, string>): Promise<void> {
  const size = fileSize(join(ref.dir, FILES.messages)) ?? 0
  // An offset past the end (a forged one, or a file rewritten since): start from the end.
  const from = Math.min(offset, size)
  const resumeAfter = Number(req.headers['last-event-id'])
  const skipUpTo = Number.isSafeInteger(resumeAfter) && resumeAfter > after ? resumeAfter : after
  res.writeHead(200, { ...headers, 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-store', 'x-accel-buffering': 'no' })
  res.write('retry: 2000\n\n')
  let stop: () => void = () => undefined
  const stopped = new Promise<void>((resolve) => (stop = resolve))
  req.on('close', stop)
  const keepalive = setInterval(() => res.write(': keepalive\n\n'), KEEPALIVE_MS)
  try {
    const locate = () => {
      const now = resolveTask(ctx.layout, ref.uuid)
      return { path: join(now.dir, FILES.messages), running: now.location === 'running' }
    }
    for await (const record of followJsonl(from, { stop: stopped, locate, pollMs: POLL_MS })) {
      const seq = typeof record.seq === 'number' ? record.seq : null
      if (seq !== null && seq <= skipUpTo) continue
      // Not on the page either (a message kept from the model's view).
      if (record.visible === false) continue
      // The view the page's own rendering is built from (message-view.ts): the script only places it.
      res.write(`${seq === null ? '' : `id: ${seq}\n`}data: ${JSON.stringify(messageView(record))}\n\n`)
    }
    if (!res.destroyed) {
      const now = resolveTask(ctx.layout, ref.uuid)
      res.write(`event: end\ndata: ${now.location}\n\n`)
    }
  } catch (err) {
    if (!res.destroyed) res.write(`event: end\ndata: unreadable (${JSON.stringify((err as Error).message)})\n\n`)
  } finally {
    clearInterval(keepalive)
    res.end()
  }
}
