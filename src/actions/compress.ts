import type { CommandEnv } from '../command-env.js'
import { withTaskEnv } from '../command-env.js'
import { activeEndpoint, missingApiKey } from '../config/endpoint.js'
import { settingsFrom } from '../context/compaction.js'
import { extractiveSummarizer, llmSummarizer } from '../context/summarizer.js'
import type { Summarizer } from '../context/summarizer.js'
import { CtxError } from '../errors.js'
import { compressTask } from '../operations/compress.js'
import type { CompressOutcome } from '../operations/compress.js'
import { assessTask } from '../operations/reaper.js'
import { askOwner } from '../run/control.js'
import { assertRegularFiles } from '../storage/fs/files.js'
import { resolveTask, TASK_DATA_FILES } from '../storage/fs/layout.js'
import type { Location, TaskRef } from '../storage/fs/layout.js'
import { stalenessPolicy } from '../storage/task/env.js'
import { readMetadata } from '../storage/task/metadata.js'
import type { Actor } from './actor.js'
import { actorName, auditAction } from './actor.js'

export interface CompressInput {
  dryRun?: boolean
  extractive?: boolean
  keepRecent?: number
  /** A running task: how long to wait for its agent's answer. */
  waitMs: number
}

/**
 * What a compress came to: a running task's agent answered (`owner`), or was asked and
 * has not answered within the wait (`owner_pending`: the request stays in its inbox);
 * else the task was compressed here, as any task no agent runs (`nothing`, `plan` for a
 * dry run, `done`), with `left` naming where a running task went before its agent answered.
 */
export type CompressActionOutcome =
  | { kind: 'owner'; uuid: string; ok: boolean; message: string }
  | { kind: 'owner_pending'; uuid: string; waitMs: number }
  | (CompressOutcome & { left: Location | null })

/**
 * Summarizes a task's context now. A live owner is the only writer of its files: it is
 * asked, and compresses at its next turn boundary with its own settings; a task no agent
 * runs (a dead agent's task is recovered first) is compressed here.
 */
export async function compressAction(ctx: CommandEnv, start: TaskRef, input: CompressInput, actor: Actor): Promise<CompressActionOutcome> {
  let ref = start
  let left: Location | null = null
  // A link, a FIFO or a directory for one of its files: refused before anything is read as "empty" or written.
  assertRegularFiles(ref.dir, TASK_DATA_FILES)
  if (ref.location === 'running' && input.dryRun !== true && (await ownerIsAlive(ctx, ref))) {
    auditAction(ctx, actor, 'compress', ref.uuid)
    const { reply, location } = await askOwner(ctx.layout, ref, 'compress', actorName(ctx, actor), input.waitMs, () => ctx.now())
    if (reply !== null) return { kind: 'owner', uuid: ref.uuid, ok: reply.ok, message: reply.message }
    if (location === 'running' || location === null) return { kind: 'owner_pending', uuid: ref.uuid, waitMs: input.waitMs }
    // The owner finished or paused before it answered: the task is compressed here.
    ref = resolveTask(ctx.layout, ref.uuid)
    assertRegularFiles(ref.dir, TASK_DATA_FILES)
    left = ref.location
  }
  // A replayed task is summarized as its own agent does it, without an LLM (no key warning for it).
  const replayed = readMetadata(ref.dir).config.llm_provider === 'replay'
  const summarizer = replayed ? extractiveSummarizer() : await summarizerFor(ctx, input)
  // Updates the index where there is one; a refusal must create nothing.
  return withTaskEnv(
    ctx,
    async (env) => {
      const outcome = await compressTask(env, ref, settingsFrom(ctx.config, input.keepRecent), summarizer, input.dryRun === true)
      if (outcome.kind === 'done') auditAction(ctx, actor, 'compress', ref.uuid)
      return { ...outcome, left }
    },
    { createIndex: false },
  )
}

async function ownerIsAlive(ctx: CommandEnv, ref: TaskRef): Promise<boolean> {
  return withTaskEnv(ctx, async (env) => !assessTask(env, ref, { policy: stalenessPolicy(ctx.config) }).stale, { createIndex: false })
}

/**
 * Fails here, before any file is touched, when no LLM is configured, except for a dry
 * run: it only plans (its estimate of an LLM summary needs no server), so it works
 * without a key. The SDK is loaded only when a summary is really made: it costs every
 * other command 100 ms of start-up.
 */
async function summarizerFor(ctx: CommandEnv, input: CompressInput): Promise<Summarizer> {
  if (input.extractive === true) return extractiveSummarizer()
  if (input.dryRun === true) {
    const provider = ctx.config.llm.provider
    const missing = provider === 'none' || provider === 'replay' ? `llm.provider is ${provider}` : (missingApiKey(ctx.config)?.message ?? null)
    if (missing !== null) ctx.io.warn(`${missing}: this plan assumes an LLM summary; compress without --dry-run needs an LLM, or --extractive`)
    return {
      method: 'llm',
      model: activeEndpoint(ctx.config).model,
      summarize: () => Promise.reject(new CtxError('a dry run makes no summary')),
    }
  }
  return llmSummarizer((await import('../llm/providers.js')).requireLlmClient(ctx.config), { maxTokens: ctx.config.context.compression.summary_max_tokens })
}
