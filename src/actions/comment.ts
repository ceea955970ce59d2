import type { CommandEnv } from '../command-env.js'
import { addComment } from '../operations/comment.js'
import type { Location, TaskRef } from '../storage/fs/layout.js'
import type { InboxRecord } from '../storage/task/inbox.js'
import type { Actor } from './actor.js'
import { actorName, auditAction } from './actor.js'

/** A comment added to a task's inbox: where the task was, and the inbox record. */
export interface CommentOutcome {
  kind: 'added'
  uuid: string
  location: Location
  record: InboxRecord
}

/** Adds a comment from the actor to a running or paused task's inbox (its agent reads it at the next turn boundary). */
export function commentTask(ctx: CommandEnv, start: TaskRef, text: string, actor: Actor): CommentOutcome {
  const { ref, record } = addComment(ctx.layout, start, text, actorName(ctx, actor), ctx.now())
  auditAction(ctx, actor, 'comment', ref.uuid)
  return { kind: 'added', uuid: ref.uuid, location: ref.location, record }
}
