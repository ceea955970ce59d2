import { Command, Option } from 'commander'
import type { CommandEnv } from '../command-env.js'
import { auditTask, withTaskEnv } from '../command-env.js'
import { CtxError, NotFoundError } from '../errors.js'
import { resolveTask } from '../storage/fs/layout.js'
import type { Location } from '../storage/fs/layout.js'
import { assessTask } from '../operations/reaper.js'
import { stalenessPolicy } from '../storage/task/env.js'
import { askOwner, locate } from '../run/control.js'
import { durationArg, withEnv } from './shared.js'

interface PauseOptions {
  wait: number
}

export function pauseCommand(): Command {
  return new Command('pause')
    .description("ask a running task's agent to pause at its next turn boundary (it moves to paused/; resume with run --resume)")
    .argument('<uuid>', 'task uuid, a unique prefix of 8+ hex characters, or last (the newest task)')
    .addOption(new Option('--wait <duration>', 'how long to wait for the agent to pause').argParser(durationArg('--wait')).default(120_000, '2m'))
    .action(withEnv(pause))
}

async function pause(ctx: CommandEnv, opts: PauseOptions, id: string): Promise<void> {
  const ref = resolveTask(ctx.layout, id)
  const report = (outcome: string, message: string) => (ctx.json ? ctx.io.json({ uuid: ref.uuid, outcome }) : ctx.io.out(message))
  // Where the task is decides: when it moves on while we look (it finishes, or pauses), where it is then.
  const settled = (location: Location | null): void => {
    if (location === 'paused') return report('already_paused', `task ${ref.uuid} is already paused`)
    if (location === 'completed') throw new CtxError(`task ${ref.uuid} is finished (in completed/); there is nothing to pause`, { exitCode: 4, hint: 'check the uuid' })
    throw new NotFoundError(`task ${ref.uuid} is gone from the task tree`, 'check the uuid with ctxagent list')
  }
  if (ref.location !== 'running') return settled(ref.location)
  const now = await withTaskEnv(ctx, async (env) => {
    const assessment = assessTask(env, ref, { policy: stalenessPolicy(ctx.config) })
    if (!assessment.stale) return 'running'
    // Its lock was gone because the task had just left running/ (finished, or paused by its agent).
    const moved = locate(ctx.layout, ref.uuid)
    if (moved !== 'running') return moved
    throw new CtxError(`task ${ref.uuid} has no live agent (${assessment.verdict.reason})`, { hint: `recover it with ctxagent unlock ${ref.uuid.slice(0, 8)}, or wait for watch-locks` })
  }, { createIndex: false })
  if (now !== 'running') return settled(now)
  auditTask(ctx, 'pause', ref.uuid)
  const asked = await askOwner(ctx.layout, ref, 'pause', ctx.osUser, opts.wait, () => ctx.now())
  if (!asked.sent) return settled(asked.location)
  if (asked.location === 'paused') return report('paused', `task ${ref.uuid} paused (resume with: ctxagent run --resume ${ref.uuid})`)
  if (asked.location === 'completed') return report('finished', `task ${ref.uuid} finished before it could pause (in completed/)`)
  throw new CtxError(`the agent of task ${ref.uuid} did not pause within ${Math.round(opts.wait / 1000)}s`, { hint: 'it pauses between turns; a long tool or LLM call delays it. The request stays in its inbox, so it will still pause' })
}
