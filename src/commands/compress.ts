import { Command, Option } from 'commander'
import { compressTask } from '../operations/compress.js'
import { settingsFrom } from '../context/compaction.js'
import { extractiveSummarizer, llmSummarizer } from '../context/summarizer.js'
import type { Summarizer } from '../context/summarizer.js'
import { activeEndpoint, missingApiKey } from '../config/schema.js'
import type { CommandEnv } from '../command-env.js'
import { auditTask, withTaskEnv } from '../command-env.js'
import { CtxError } from '../errors.js'
import { askOwner } from '../run/control.js'
import { assertRegularFiles } from '../storage/fs/files.js'
import { resolveTask, TASK_DATA_FILES } from '../storage/fs/layout.js'
import type { TaskRef } from '../storage/fs/layout.js'
import { assessTask } from '../operations/reaper.js'
import { stalenessPolicy } from '../storage/task/env.js'
import { readMetadata } from '../storage/task/metadata.js'
import { durationArg, positiveIntArg, withEnv } from './shared.js'
import { grouped } from '../text.js'

interface CompressOptions {
  dryRun?: boolean
  extractive?: boolean
  keepRecent?: number
  wait: number
}

export function compressCommand(): Command {
  return new Command('compress')
    .description("summarize a task's context now (a running task is asked to do it by its agent; a dead agent's task is recovered first)")
    .argument('<uuid>', 'task uuid, a unique prefix of 8+ hex characters, or last (the newest task)')
    .option('--dry-run', 'show what would be summarized and the expected saving; write nothing')
    .option('--extractive', 'summarize without an LLM (keeps the task, file paths, errors, decisions, tools)')
    .option('--keep-recent <n>', 'messages kept verbatim (default: config context.compression.keep_recent)', positiveIntArg)
    .addOption(new Option('--wait <duration>', "a running task: how long to wait for its agent's answer").argParser(durationArg('--wait')).default(120_000, '2m'))
    .action(withEnv(compress))
}

async function compress(ctx: CommandEnv, opts: CompressOptions, id: string): Promise<void> {
  let ref = resolveTask(ctx.layout, id)
  // A link, a FIFO or a directory for one of its files: refused before anything is read as "empty" or written.
  assertRegularFiles(ref.dir, TASK_DATA_FILES)
  if (ref.location === 'running' && opts.dryRun !== true && (await ownerIsAlive(ctx, ref))) {
    if (await askRunningOwner(ctx, ref, opts)) return
    // The owner finished or paused before it answered: the task is compressed here, as any task no agent runs.
    ref = resolveTask(ctx.layout, ref.uuid)
    assertRegularFiles(ref.dir, TASK_DATA_FILES)
    ctx.io.warn(`task ${ref.uuid} left running/ before its agent answered (now in ${ref.location}/); compressing it here`)
  }
  // A replayed task is summarized as its own agent does it, without an LLM (issue 19: no key warning for it).
  const replayed = readMetadata(ref.dir).config.llm_provider === 'replay'
  const summarizer = replayed ? extractiveSummarizer() : await summarizerFor(ctx, opts)
  await withTaskEnv(ctx, async (env) => {
    const outcome = await compressTask(env, ref, settingsFrom(ctx.config, opts.keepRecent), summarizer, opts.dryRun === true)
    if (outcome.kind === 'done') auditTask(ctx, 'compress', ref.uuid)
    if (ctx.json) {
      ctx.io.json(outcome.kind === 'done' ? outcome.record : outcome)
      return
    }
    const n = grouped
    if (outcome.kind === 'nothing') ctx.io.out(`task ${outcome.uuid}: nothing to compress (${outcome.reason})`)
    else if (outcome.kind === 'plan') {
      ctx.io.out(
        [
          `dry run: task ${outcome.uuid}`,
          `  would summarize messages ${outcome.start_seq}-${outcome.end_seq} (${outcome.messages} messages, ${outcome.method}), keeping the last ${outcome.kept}`,
          `  tokens ${n(outcome.tokens_before)} → about ${n(outcome.expected_tokens_after)} (${pct(outcome.expected_tokens_after, outcome.tokens_before)} of before)`,
          '  nothing was written',
        ].join('\n'),
      )
    } else {
      const r = outcome.record
      if (outcome.reaped) ctx.io.out(`task ${outcome.uuid}: its agent was dead (${outcome.reaped.reason}); it is now in completed/ as failed`)
      ctx.io.out(
        `task ${outcome.uuid}: summary ${r.summary_id} (${r.method}${r.model ? `, ${r.model}` : ''}) of messages ${r.start_seq}-${r.end_seq}; window tokens ${n(outcome.tokens_before)} → ${n(outcome.tokens_after)} (summary ratio ${r.compression_ratio})`,
      )
    }
  }, { createIndex: false }) // updates tasks.db where there is one; a refusal must create nothing
}

/**
 * Fails here, before any file is touched, when no LLM is configured, except for a dry
 * run: it only plans (its estimate of an LLM summary needs no server), so it works
 * without a key. The SDK is loaded only when a summary is really made: it costs every
 * other command 100 ms of start-up.
 */
async function summarizerFor(ctx: CommandEnv, opts: CompressOptions): Promise<Summarizer> {
  if (opts.extractive) return extractiveSummarizer()
  if (opts.dryRun) {
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

async function ownerIsAlive(ctx: CommandEnv, ref: TaskRef): Promise<boolean> {
  return withTaskEnv(ctx, async (env) => !assessTask(env, ref, { policy: stalenessPolicy(ctx.config) }).stale, { createIndex: false })
}

/**
 * A live owner is the only writer of its files: it is asked, and compresses at its next
 * turn boundary (SPEC §12.6). False when the task left running/ before the owner answered
 * (it finished or paused meanwhile): the wait ends then, not at --wait.
 */
async function askRunningOwner(ctx: CommandEnv, ref: TaskRef, opts: CompressOptions): Promise<boolean> {
  if (opts.extractive || opts.keepRecent !== undefined) ctx.io.warn('the running agent compresses with its own settings; --extractive and --keep-recent apply only to tasks no agent runs')
  auditTask(ctx, 'compress', ref.uuid)
  const { reply, location } = await askOwner(ctx.layout, ref, 'compress', ctx.osUser, opts.wait, () => ctx.now())
  if (reply === null && location !== 'running' && location !== null) return false
  if (reply === null) {
    throw new CtxError(`the agent of task ${ref.uuid} did not answer within ${Math.round(opts.wait / 1000)}s`, { hint: 'it reads requests between turns; a long tool or LLM call delays it. The request stays in its inbox' })
  }
  if (ctx.json) ctx.io.json({ uuid: ref.uuid, asked: 'owner', ok: reply.ok, message: reply.message })
  else ctx.io.out(`task ${ref.uuid}: ${reply.ok ? 'compressed by its agent' : 'not compressed'}: ${reply.message}`)
  return true
}

function pct(after: number, before: number): string {
  return before > 0 ? `${Math.round((after / before) * 100)}%` : '-'
}
