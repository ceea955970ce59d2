import { createInterface } from 'node:readline'
import type { CommandEnv } from '../../command-env.js'
import { sendChatMessage, waitForReply } from '../../run/chat-client.js'
import { appendInbox } from '../../storage/task/inbox.js'

/**
 * `run --chat` on a terminal is the chat itself (issue 19): a typed line is a message to
 * the session this process serves, its answer is printed, Ctrl-D ends the session. It
 * talks through the task's inbox like `ctxagent chat` from another terminal, so the
 * agent loop cannot tell the two apart. Returns the function that stops it.
 */
export function chatHere(ctx: CommandEnv, uuid: string): () => void {
  const dir = ctx.layout.taskDir('running', uuid)
  const rl = createInterface({ input: process.stdin, output: process.stdout, terminal: true })
  let closed = false
  // Ctrl-C belongs to the run (it pauses the task), not to the prompt.
  rl.on('SIGINT', () => process.kill(process.pid, 'SIGINT'))
  rl.setPrompt(ctx.io.chalk.bold('you> '))
  ctx.io.out(`chat task ${uuid}: type a message; Ctrl-D ends the session, Ctrl-C pauses it`)
  rl.prompt()
  void (async () => {
    for await (const line of rl) {
      if (line.trim() === '') {
        rl.prompt()
        continue
      }
      const { record, from } = sendChatMessage(dir, ctx.osUser, line, ctx.now())
      const outcome = await waitForReply(ctx.layout, uuid, record.id, from, 24 * 3_600_000)
      if (closed) return
      if (outcome.kind !== 'reply') return
      ctx.io.out(`${ctx.io.chalk.cyan('agent>')} ${outcome.message.content}`)
      rl.prompt()
    }
    // Ctrl-D: the session ends as `chat --end` ends it.
    if (!closed) appendInbox(dir, { kind: 'control', action: 'end', sender: ctx.osUser }, ctx.now())
  })().catch((err: Error) => ctx.io.warn(`chat: ${err.message}`))
  return () => {
    closed = true
    rl.close()
  }
}
