import { Command } from 'commander'
import type { CommandEnv } from '../command-env.js'
import { CLI } from '../actions/actor.js'
import { commentTask } from '../actions/comment.js'
import { resolveTask } from '../storage/fs/layout.js'
import { withEnv } from '../command-kit/shared.js'

export function commentCommand(): Command {
  return new Command('comment')
    .description("add a comment to a running or paused task's inbox; its agent reads it at the next turn boundary, as a comment from you")
    .argument('<uuid>', 'task uuid, a unique prefix of 8+ hex characters, or last (the newest task)')
    .argument('<text...>', 'the comment')
    .action(withEnv(comment))
}

async function comment(ctx: CommandEnv, _opts: object, id: string, words: string[]): Promise<void> {
  const { uuid, location, record } = commentTask(ctx, resolveTask(ctx.layout, id), words.join(' '), CLI)
  if (ctx.json) ctx.io.json({ uuid, location, record })
  else ctx.io.out(`comment ${record.id} added to task ${uuid} (${location}); its agent reads it at the next turn boundary`)
}
