import { Command, Option } from 'commander'
import type { CommandEnv } from '../command-env.js'
import { CtxError } from '../errors.js'
import { CLI } from '../actions/actor.js'
import { compressAction } from '../actions/compress.js'
import { resolveTask } from '../storage/fs/layout.js'
import { durationArg, positiveIntArg, withEnv } from '../command-kit/shared.js'
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
    .addOption(
      new Option('--wait <duration>', "a running task: how long to wait for its agent's answer").argParser(durationArg('--wait')).default(120_000, '2m'),
    )
    .action(withEnv(compress))
}

async function compress(ctx: CommandEnv, opts: CompressOptions, id: string): Promise<void> {
  const outcome = await compressAction(ctx, resolveTask(ctx.layout, id), { ...opts, waitMs: opts.wait }, CLI)
  if (outcome.kind === 'owner' || outcome.kind === 'owner_pending') {
    if (opts.extractive || opts.keepRecent !== undefined)
      ctx.io.warn('the running agent compresses with its own settings; --extractive and --keep-recent apply only to tasks no agent runs')
    if (outcome.kind === 'owner_pending') {
      throw new CtxError(`the agent of task ${outcome.uuid} did not answer within ${Math.round(opts.wait / 1000)}s`, {
        hint: 'it reads requests between turns; a long tool or LLM call delays it. The request stays in its inbox',
      })
    }
    if (ctx.json) ctx.io.json({ uuid: outcome.uuid, asked: 'owner', ok: outcome.ok, message: outcome.message })
    else ctx.io.out(`task ${outcome.uuid}: ${outcome.ok ? 'compressed by its agent' : 'not compressed'}: ${outcome.message}`)
    return
  }
  if (outcome.left !== null) ctx.io.warn(`task ${outcome.uuid} left running/ before its agent answered (now in ${outcome.left}/); compressing it here`)
  const { left: _left, ...result } = outcome
  if (ctx.json) {
    ctx.io.json(result.kind === 'done' ? result.record : result)
    return
  }
  const n = grouped
  if (result.kind === 'nothing') ctx.io.out(`task ${result.uuid}: nothing to compress (${result.reason})`)
  else if (result.kind === 'plan') {
    ctx.io.out(
      [
        `dry run: task ${result.uuid}`,
        `  would summarize messages ${result.start_seq}-${result.end_seq} (${result.messages} messages, ${result.method}), keeping the last ${result.kept}`,
        `  tokens ${n(result.tokens_before)} → about ${n(result.expected_tokens_after)} (${pct(result.expected_tokens_after, result.tokens_before)} of before)`,
        '  nothing was written',
      ].join('\n'),
    )
  } else {
    const r = result.record
    if (result.reaped) ctx.io.out(`task ${result.uuid}: its agent was dead (${result.reaped.reason}); it is now in completed/ as failed`)
    ctx.io.out(
      `task ${result.uuid}: summary ${r.summary_id} (${r.method}${r.model ? `, ${r.model}` : ''}) of messages ${r.start_seq}-${r.end_seq}; window tokens ${n(result.tokens_before)} → ${n(result.tokens_after)} (summary ratio ${r.compression_ratio})`,
    )
  }
}

function pct(after: number, before: number): string {
  return before > 0 ? `${Math.round((after / before) * 100)}%` : '-'
}
