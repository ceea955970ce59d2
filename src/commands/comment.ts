import { Command } from 'commander'
import type { CommandEnv } from '../command-env.js'
import { auditTask } from '../command-env.js'
import { CtxError, isErrno, UsageError } from '../errors.js'
import { appendInbox } from '../storage/task/inbox.js'
import { resolveTask } from '../storage/fs/layout.js'
import { withEnv } from './shared.js'

const MAX_COMMENT = 100_000

export function commentCommand(): Command {
  return new Command('comment')
    .description("add a comment to a running or paused task's inbox; its agent reads it at the next turn boundary, as a comment from you")
    .argument('<uuid>', 'task uuid, a unique prefix of 8+ hex characters, or last (the newest task)')
    .argument('<text...>', 'the comment')
    .action(withEnv(comment))
}

async function comment(ctx: CommandEnv, _opts: object, id: string, words: string[]): Promise<void> {
  const text = words.join(' ')
  if (text.trim() === '') throw new UsageError('the comment is empty', 'say something')
  if (text.length > MAX_COMMENT) throw new UsageError(`the comment is ${text.length.toLocaleString('en-US')} characters`, `keep it under ${MAX_COMMENT.toLocaleString('en-US')}`)
  let ref = resolveTask(ctx.layout, id)
  const append = () => {
    if (ref.location === 'completed') throw new CtxError(`task ${ref.uuid} is finished (in completed/); no agent will read the comment`, { exitCode: 4, hint: 'start a new task with the same --task-id to continue from its summary' })
    return appendInbox(ref.dir, { kind: 'message', sender: ctx.osUser, content: text }, ctx.now())
  }
  let record
  try {
    record = append()
  } catch (err) {
    // The task moved (paused or resumed) between finding it and writing: find it again, once.
    if (!isErrno(err, 'ENOENT')) throw err
    ref = resolveTask(ctx.layout, ref.uuid)
    record = append()
  }
  auditTask(ctx, 'comment', ref.uuid)
  if (ctx.json) ctx.io.json({ uuid: ref.uuid, location: ref.location, record })
  else ctx.io.out(`comment ${record.id} added to task ${ref.uuid} (${ref.location}); its agent reads it at the next turn boundary`)
}
