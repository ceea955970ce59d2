import type { CommandEnv } from '../command-env.js'
import { withTaskEnv } from '../command-env.js'
import { CtxError, NotFoundError } from '../errors.js'
import { assessTask } from '../operations/reaper.js'
import { askOwner, locate } from '../run/control.js'
import type { Location, TaskRef } from '../storage/fs/layout.js'
import { stalenessPolicy } from '../storage/task/env.js'
import type { Actor } from './actor.js'
import { actorName, auditAction } from './actor.js'

/**
 * What a pause came to: the task was paused already, it paused, it finished before it
 * could, or its agent was asked and has not paused within the wait (it does at its next
 * turn boundary: the request stays in its inbox).
 */
export type PauseOutcome =
  | { kind: 'already_paused'; uuid: string }
  | { kind: 'paused'; uuid: string }
  | { kind: 'finished'; uuid: string }
  | { kind: 'asked'; uuid: string; waitMs: number }

/**
 * Asks a running task's agent to pause and waits up to `waitMs` for it to leave
 * running/. A task that is finished, gone, or has no live agent is refused (thrown);
 * so is one that left running/ for completed/ while this looked (its lock was gone
 * because it had just finished): where it is then decides, as if it had been there.
 */
export async function pauseTask(ctx: CommandEnv, ref: TaskRef, actor: Actor, waitMs: number): Promise<PauseOutcome> {
  const uuid = ref.uuid
  // Where the task is decides: when it moves on while we look (it finishes, or pauses), where it is then.
  const settled = (location: Location | null): PauseOutcome => {
    if (location === 'paused') return { kind: 'already_paused', uuid }
    if (location === 'completed')
      throw new CtxError(`task ${uuid} is finished (in completed/); there is nothing to pause`, { exitCode: 4, hint: 'check the uuid' })
    throw new NotFoundError(`task ${uuid} is gone from the task tree`, 'check the uuid with ctxagent list')
  }
  if (ref.location !== 'running') return settled(ref.location)
  const now = await withTaskEnv(
    ctx,
    async (env) => {
      const assessment = assessTask(env, ref, { policy: stalenessPolicy(ctx.config) })
      if (!assessment.stale) return 'running'
      // Its lock was gone because the task had just left running/ (finished, or paused by its agent).
      const moved = locate(ctx.layout, uuid)
      if (moved !== 'running') return moved
      throw new CtxError(`task ${uuid} has no live agent (${assessment.verdict.reason})`, {
        hint: `recover it with ctxagent unlock ${uuid.slice(0, 8)}, or wait for watch-locks`,
      })
    },
    { createIndex: false },
  )
  if (now !== 'running') return settled(now)
  auditAction(ctx, actor, 'pause', uuid)
  const asked = await askOwner(ctx.layout, ref, 'pause', actorName(ctx, actor), waitMs, () => ctx.now())
  if (!asked.sent) return settled(asked.location)
  if (asked.location === 'paused') return { kind: 'paused', uuid }
  if (asked.location === 'completed') return { kind: 'finished', uuid }
  return { kind: 'asked', uuid, waitMs }
}
