import type { CommandEnv } from '../command-env.js'
import { fleetDatabaseUrl } from '../command-env.js'
import type { Actor } from '../actions/actor.js'
import { auditAction } from '../actions/actor.js'
import { commentTask } from '../actions/comment.js'
import { compressAction } from '../actions/compress.js'
import { queueResume } from '../actions/enqueue.js'
import { cancelJobAction, retryJobAction } from '../actions/jobs.js'
import type { CancelOutcome } from '../actions/jobs.js'
import { pauseTask } from '../actions/pause.js'
import { CtxError } from '../errors.js'
import { resolveTask } from '../storage/fs/layout.js'
import { explainSystemError } from '../system-errors.js'

/**
 * The page's actions: the CLI's own (src/actions/), taken by the signed-in operator
 * (audited with their name and `via: serve`), their outcomes rendered as an HTTP status,
 * a JSON body (the command's --json) and a line for the page.
 */
export type ActionName = 'pause' | 'resume' | 'comment' | 'compress'
export const ACTIONS: readonly ActionName[] = ['pause', 'resume', 'comment', 'compress']

export interface ActionInput {
  operator: string
  text?: string | undefined
  extractive?: boolean
  /** How long to wait for a running owner (pause, compress, cancel); the request stays in its inbox after. */
  waitMs: number
}

export interface ActionResult {
  /** 200 done, 202 asked (the owner acts at its next turn boundary). */
  status: 200 | 202
  body: Record<string, unknown>
  message: string
}

export async function runAction(ctx: CommandEnv, name: ActionName, uuid: string, input: ActionInput): Promise<ActionResult> {
  const ref = resolveTask(ctx.layout, uuid)
  const actor: Actor = { via: 'serve', operator: input.operator }
  try {
    if (name === 'pause') {
      const o = await pauseTask(ctx, ref, actor, input.waitMs)
      const messages = {
        already_paused: `task ${o.uuid} is already paused`,
        paused: `task ${o.uuid} paused`,
        finished: `task ${o.uuid} finished before it could pause (in completed/)`,
        asked: `asked the agent of task ${o.uuid} to pause: it pauses at its next turn boundary (the request stays in its inbox)`,
      }
      return { status: o.kind === 'asked' ? 202 : 200, body: { uuid: o.uuid, outcome: o.kind }, message: messages[o.kind] }
    }
    if (name === 'resume') {
      const o = await queueResume(ctx, ref, actor)
      if (o.kind === 'held') throw new CtxError(`task ${o.uuid} already has a job waiting or running`, { exitCode: 4, hint: 'see the fleet page' })
      return { status: 200, body: { uuid: o.uuid, job: o.job }, message: `resume of task ${o.uuid} queued as job ${o.job}` }
    }
    if (name === 'comment') {
      const o = commentTask(ctx, ref, input.text ?? '', actor)
      return {
        status: 200,
        body: { uuid: o.uuid, location: o.location, record: o.record },
        message: `comment ${o.record.id} added; the agent reads it at its next turn boundary`,
      }
    }
    const o = await compressAction(ctx, ref, { extractive: input.extractive === true, waitMs: input.waitMs }, actor)
    if (o.kind === 'owner')
      return {
        status: 200,
        body: { uuid: o.uuid, asked: 'owner', ok: o.ok, message: o.message },
        message: `${o.ok ? 'compressed by its agent' : 'not compressed'}: ${o.message}`,
      }
    if (o.kind === 'owner_pending')
      return {
        status: 202,
        body: { uuid: o.uuid, asked: 'owner', ok: null },
        message: 'asked its agent to compress: it does so at its next turn boundary (the request stays in its inbox)',
      }
    if (o.kind === 'nothing') return { status: 200, body: { kind: o.kind, uuid: o.uuid, reason: o.reason }, message: `nothing to compress (${o.reason})` }
    if (o.kind !== 'done') throw new CtxError('compress made a plan instead of a summary')
    const r = o.record
    return {
      status: 200,
      body: { ...r },
      message: `summary ${r.summary_id} (${r.method}) of messages ${r.start_seq}-${r.end_seq}; window tokens ${o.tokens_before} → ${o.tokens_after}`,
    }
  } catch (err) {
    throw explainSystemError(err, ctx.layout.base) ?? err
  }
}

export type JobActionName = 'cancel' | 'retry'

/** `ctxagent jobs cancel|retry <id>` from the page: the same actions, the same outcomes. */
export async function runJobAction(ctx: CommandEnv, name: JobActionName, id: number, input: ActionInput): Promise<ActionResult> {
  if (fleetDatabaseUrl(ctx) === null)
    throw new CtxError('there is no fleet here, so no job', { exitCode: 3, hint: 'set fleet.database_url (or CTXAGENT_DATABASE_URL)' })
  const actor: Actor = { via: 'serve', operator: input.operator }
  if (name === 'retry') {
    const again = await retryJobAction(ctx, id, actor)
    return {
      status: 200,
      body: { job: id, task_uuid: again.task_uuid, state: 'waiting', kind: again.kind, was: again.was },
      message:
        again.was === 'retrying'
          ? `job ${id} runs now, not at its retry time`
          : `job ${id} waits again (${again.kind === 'resume' ? 'to resume' : 'to start'} its task)`,
    }
  }
  const o = await cancelJobAction(ctx, id, actor, input.waitMs)
  return { status: o.task === 'asked' ? 202 : 200, body: { job: o.job, task_uuid: o.task_uuid, state: o.state, task: o.task }, message: cancelMessage(o) }
}

/** Said as the job's row says it: "cancelled" only once it is; until then, what its worker has yet to do. */
function cancelMessage(o: CancelOutcome): string {
  if (o.was !== 'running') return `job ${o.job} cancelled; it will not run again`
  if (o.task === 'asked') return `job ${o.job} is cancelling: its agent was asked to pause and does so at its next turn boundary; the job ends cancelled then`
  const job = o.state === 'running' ? `job ${o.job} is cancelling (its worker ends it cancelled once its task stops)` : `job ${o.job} ${o.state}`
  if (o.task === 'paused') return `${job}; its task paused`
  if (o.task === 'finished') return `${job}; its task finished before it could pause`
  return `${job}; its task ${o.task === 'not_started' ? 'has not started' : `is in ${o.task}/`}: its worker does not start it, or pauses it as its agent starts`
}

/** A read or sign-in on the page, in audit.jsonl with the operator's name (`anonymous` on loopback without one). */
export function serveAudit(ctx: CommandEnv, command: string, uuid: string | null, operator: string): void {
  auditAction(ctx, { via: 'serve', operator }, command, uuid)
}
