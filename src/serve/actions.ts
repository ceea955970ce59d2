import type { CommandEnv } from '../command-env.js'
import { fleetDatabaseUrl, withTaskEnv } from '../command-env.js'
import { settingsFrom } from '../context/compaction.js'
import { extractiveSummarizer, llmSummarizer } from '../context/summarizer.js'
import type { Summarizer } from '../context/summarizer.js'
import { CtxError } from '../errors.js'
import { JobQueue } from '../fleet/jobs.js'
import { cancelJob, retryJob } from '../fleet/job-admin.js'
import { locateTask } from '../storage/fs/layout.js'
import type { Location } from '../storage/fs/layout.js'
import { addComment } from '../operations/comment.js'
import { compressTask } from '../operations/compress.js'
import { assessTask } from '../operations/reaper.js'
import { askOwner } from '../run/control.js'
import { assertRegularFiles } from '../storage/fs/files.js'
import { explainSystemError } from '../system-errors.js'
import { resolveTask, TASK_DATA_FILES } from '../storage/fs/layout.js'
import type { TaskRef } from '../storage/fs/layout.js'
import { connectPool, pgReason } from '../storage/index/pg-pool.js'
import { migrate } from '../storage/index/pg-schema.js'
import { audit } from '../storage/task/audit.js'
import { stalenessPolicy } from '../storage/task/env.js'
import { readMetadata } from '../storage/task/metadata.js'

/**
 * The page's actions: each the CLI's own operation (pause, comment, compress call the
 * same core functions in the same order as their commands; resume queues the job that
 * `enqueue --resume` queues), audited with the operator's name and `via: serve`.
 */
export type ActionName = 'pause' | 'resume' | 'comment' | 'compress'
export const ACTIONS: readonly ActionName[] = ['pause', 'resume', 'comment', 'compress']

export interface ActionInput {
  operator: string
  text?: string | undefined
  extractive?: boolean
  /** How long to wait for a running owner (pause, compress); the request stays in its inbox after. */
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
  const done = (command: string, r: TaskRef) => serveAudit(ctx, command, r.uuid, input.operator)
  try {
    if (name === 'pause') return await pause(ctx, ref, input, done)
    if (name === 'resume') return await resume(ctx, ref, done)
    if (name === 'comment') return comment(ctx, ref, input, done)
    return await compress(ctx, ref, input, done)
  } catch (err) {
    throw explainSystemError(err, ctx.layout.base) ?? err
  }
}

export type JobActionName = 'cancel' | 'retry'

/**
 * `ctxagent jobs cancel|retry <id>` from the page: the same functions of the fleet's job
 * admin, and for a running job the pause `jobs cancel` asks of its agent; audited.
 */
export async function runJobAction(ctx: CommandEnv, name: JobActionName, id: number, input: ActionInput): Promise<ActionResult> {
  const url = fleetDatabaseUrl(ctx)
  if (url === null) throw new CtxError('there is no fleet here, so no job', { exitCode: 3, hint: 'set fleet.database_url (or CTXAGENT_DATABASE_URL)' })
  const locate = (uuid: string): Location | null => locateTask(ctx.layout, uuid)?.location ?? null
  const pool = await connectPool(url, 'serve', 1)
  try {
    if (name === 'retry') {
      const again = await retryJob(pool, id, locate)
      serveAudit(ctx, 'jobs retry', again.task_uuid, input.operator)
      return { status: 200, body: { job: id, task_uuid: again.task_uuid, state: 'waiting', kind: again.kind }, message: `job ${id} waits again (${again.kind === 'resume' ? 'to resume' : 'to start'} its task)` }
    }
    const cancelled = await cancelJob(pool, id)
    serveAudit(ctx, 'jobs cancel', cancelled.task_uuid, input.operator)
    const body = (task: string) => ({ job: id, task_uuid: cancelled.task_uuid, state: 'cancelled', task })
    if (cancelled.was !== 'running' || locate(cancelled.task_uuid) !== 'running') return { status: 200, body: body(locate(cancelled.task_uuid) ?? 'not_started'), message: cancelled.was === 'running' ? `job ${id} cancelled; its worker does not start its task, or pauses it as its agent starts` : `job ${id} cancelled; it will not run` }
    const dir = ctx.layout.taskDir('running', cancelled.task_uuid)
    const asked = await askOwner(ctx.layout, { uuid: cancelled.task_uuid, location: 'running', dir }, 'pause', input.operator, input.waitMs, () => ctx.now())
    if (asked.location === 'paused') return { status: 200, body: body('paused'), message: `job ${id} cancelled; its task paused` }
    if (asked.location === 'completed') return { status: 200, body: body('finished'), message: `job ${id} cancelled; its task finished before it could pause` }
    return { status: 202, body: body('asked'), message: `job ${id} cancelled; its agent was asked to pause and does so at its next turn boundary` }
  } finally {
    await pool.end().catch(() => undefined)
  }
}

export function serveAudit(ctx: CommandEnv, command: string, uuid: string | null, operator: string): void {
  try {
    audit(ctx.layout, { ts: ctx.now().toISOString(), os_user: ctx.osUser, command, uuid, via: 'serve', operator })
  } catch (err) {
    ctx.io.warn(`audit.jsonl not written: ${(err as Error).message}`)
  }
}

type Done = (command: string, ref: TaskRef) => void

async function pause(ctx: CommandEnv, ref: TaskRef, input: ActionInput, done: Done): Promise<ActionResult> {
  const ok = (outcome: string, message: string, status: 200 | 202 = 200): ActionResult => ({ status, body: { uuid: ref.uuid, outcome }, message })
  if (ref.location === 'paused') return ok('already_paused', `task ${ref.uuid} is already paused`)
  if (ref.location === 'completed') throw new CtxError(`task ${ref.uuid} is finished (in completed/); there is nothing to pause`, { exitCode: 4, hint: 'check the uuid' })
  await ensureLiveOwner(ctx, ref)
  done('pause', ref)
  const asked = await askOwner(ctx.layout, ref, 'pause', input.operator, input.waitMs, () => ctx.now())
  if (asked.location === 'paused') return ok('paused', `task ${ref.uuid} paused`)
  if (asked.location === 'completed') return ok('finished', `task ${ref.uuid} finished before it could pause (in completed/)`)
  return ok('asked', `asked the agent of task ${ref.uuid} to pause: it pauses at its next turn boundary (the request stays in its inbox)`, 202)
}

async function ensureLiveOwner(ctx: CommandEnv, ref: TaskRef): Promise<void> {
  await withTaskEnv(ctx, async (env) => {
    const assessment = assessTask(env, ref, { policy: stalenessPolicy(ctx.config) })
    if (assessment.stale) throw new CtxError(`task ${ref.uuid} has no live agent (${assessment.verdict.reason})`, { hint: `recover it with ctxagent unlock ${ref.uuid.slice(0, 8)}, or wait for watch-locks` })
  }, { createIndex: false })
}

/** In a fleet, the resume job `enqueue --resume` queues; on one host, the command to run (a page cannot start an agent). */
async function resume(ctx: CommandEnv, ref: TaskRef, done: Done): Promise<ActionResult> {
  if (ref.location !== 'paused') {
    throw new CtxError(`task ${ref.uuid} is ${ref.location === 'running' ? 'running' : 'finished'} (in ${ref.location}/), not paused`, { exitCode: 4, hint: ref.location === 'running' ? 'pause it first' : 'start a new task with the same --task-id to continue from its summary' })
  }
  const url = fleetDatabaseUrl(ctx)
  if (url === null) throw new CtxError(`task ${ref.uuid} is paused, and there is no fleet to queue its resume in`, { exitCode: 4, hint: `run ctxagent run --resume ${ref.uuid} on a host, or set fleet.database_url` })
  const pool = await connectPool(url, 'serve', 1)
  try {
    const id = await (async () => {
      const client = await pool.connect()
      try {
        await migrate(client)
      } finally {
        client.release()
      }
      return new JobQueue(pool).enqueue({ task_uuid: ref.uuid, kind: 'resume', spec: {} })
    })().catch((err: unknown) => {
      throw new CtxError(`the job was not queued (${pgReason(err)})`, { exitCode: 1, hint: 'check that the database is up, then try again' })
    })
    if (id === null) throw new CtxError(`task ${ref.uuid} already has a job waiting or running`, { exitCode: 4, hint: 'see the fleet page' })
    done('enqueue', ref)
    return { status: 200, body: { uuid: ref.uuid, job: id }, message: `resume of task ${ref.uuid} queued as job ${id}` }
  } finally {
    await pool.end().catch(() => undefined)
  }
}

function comment(ctx: CommandEnv, start: TaskRef, input: ActionInput, done: Done): ActionResult {
  const { ref, record } = addComment(ctx.layout, start, input.text ?? '', input.operator, ctx.now())
  done('comment', ref)
  return { status: 200, body: { uuid: ref.uuid, location: ref.location, record }, message: `comment ${record.id} added; the agent reads it at its next turn boundary` }
}

async function compress(ctx: CommandEnv, start: TaskRef, input: ActionInput, done: Done): Promise<ActionResult> {
  let ref = start
  assertRegularFiles(ref.dir, TASK_DATA_FILES)
  if (ref.location === 'running') {
    const alive = await withTaskEnv(ctx, async (env) => !assessTask(env, ref, { policy: stalenessPolicy(ctx.config) }).stale, { createIndex: false })
    if (alive) {
      done('compress', ref)
      const { reply, location } = await askOwner(ctx.layout, ref, 'compress', input.operator, input.waitMs, () => ctx.now())
      if (reply !== null) return { status: 200, body: { uuid: ref.uuid, asked: 'owner', ok: reply.ok, message: reply.message }, message: `${reply.ok ? 'compressed by its agent' : 'not compressed'}: ${reply.message}` }
      if (location === 'running') return { status: 202, body: { uuid: ref.uuid, asked: 'owner', ok: null }, message: 'asked its agent to compress: it does so at its next turn boundary (the request stays in its inbox)' }
      ref = resolveTask(ctx.layout, ref.uuid)
      assertRegularFiles(ref.dir, TASK_DATA_FILES)
    }
  }
  const replayed = readMetadata(ref.dir).config.llm_provider === 'replay'
  const summarizer: Summarizer = replayed || input.extractive === true ? extractiveSummarizer() : llmSummarizer((await import('../llm/providers.js')).requireLlmClient(ctx.config), { maxTokens: ctx.config.context.compression.summary_max_tokens })
  return withTaskEnv(ctx, async (env) => {
    const outcome = await compressTask(env, ref, settingsFrom(ctx.config, undefined), summarizer, false)
    if (outcome.kind === 'nothing') return { status: 200 as const, body: { ...outcome }, message: `nothing to compress (${outcome.reason})` }
    if (outcome.kind !== 'done') throw new CtxError('compress made a plan instead of a summary')
    done('compress', ref)
    const r = outcome.record
    return { status: 200 as const, body: { ...r }, message: `summary ${r.summary_id} (${r.method}) of messages ${r.start_seq}-${r.end_seq}; window tokens ${outcome.tokens_before} → ${outcome.tokens_after}` }
  }, { createIndex: false })
}
