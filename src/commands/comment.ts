import { Command } from 'commander'
import type { CommandEnv } from '../command-env.js'
import { auditTask } from '../command-env.js'
import { addComment } from '../operations/comment.js'
import { resolveTask } from '../storage/fs/layout.js'
import { withEnv } from './shared.js'

export function commentCommand(): Command {
  return new Command('comment')
    .description("add a comment to a running or paused task's inbox; its agent reads it at the next turn boundary, as a comment from you")
    .argument('<uuid>', 'task uuid, a unique prefix of 8+ hex characters, or last (the newest task)')
    .argument('<text...>', 'the comment')
    .action(withEnv(comment))
}

async function comment(ctx: CommandEnv, _opts: object, id: string, words: string[]): Promise<void> {
  const { ref, record } = addComment(ctx.layout, resolveTask(ctx.layout, id), words.join(' '), ctx.osUser, ctx.now())
  auditTask(ctx, 'comment', ref.uuid)
  if (ctx.json) ctx.io.json({ uuid: ref.uuid, location: ref.location, record })
  else ctx.io.out(`comment ${record.id} added to task ${ref.uuid} (${ref.location}); its agent reads it at the next turn boundary`)
}
