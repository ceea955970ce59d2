import type { CommandEnv } from '../command-env.js'
import { auditTask } from '../command-env.js'
import { audit } from '../storage/task/audit.js'

/**
 * Who takes an action: the OS user at the command line, or the operator signed in to
 * `serve` (audited with `via: serve` and their name). Inbox requests carry `name`.
 */
export type Actor = { via: 'cli' } | { via: 'serve'; operator: string }

export const CLI: Actor = { via: 'cli' }

/** The name an action's inbox request and audit line give for the actor. */
export function actorName(ctx: CommandEnv, actor: Actor): string {
  return actor.via === 'serve' ? actor.operator : ctx.osUser
}

/** One line in audit.jsonl for an action; a failure to write it is a warning, never the action's failure. */
export function auditAction(ctx: CommandEnv, actor: Actor, command: string, uuid: string | null): void {
  if (actor.via === 'cli') return auditTask(ctx, command, uuid)
  try {
    audit(ctx.layout, { ts: ctx.now().toISOString(), os_user: ctx.osUser, command, uuid, via: 'serve', operator: actor.operator })
  } catch (err) {
    ctx.io.warn(`audit.jsonl not written: ${(err as Error).message}`)
  }
}
