import { Command, Option } from 'commander'
import type { CommandEnv } from '../command-env.js'
import { CtxError } from '../errors.js'
import { CLI } from '../actions/actor.js'
import { pauseTask } from '../actions/pause.js'
import type { PauseOutcome } from '../actions/pause.js'
import { resolveTask } from '../storage/fs/layout.js'
import { durationArg, withEnv } from '../command-kit/shared.js'

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
  const outcome = await pauseTask(ctx, resolveTask(ctx.layout, id), CLI, opts.wait)
  if (outcome.kind === 'asked') {
    throw new CtxError(`the agent of task ${outcome.uuid} did not pause within ${Math.round(opts.wait / 1000)}s`, {
      hint: 'it pauses between turns; a long tool or LLM call delays it. The request stays in its inbox, so it will still pause',
    })
  }
  if (ctx.json) ctx.io.json({ uuid: outcome.uuid, outcome: outcome.kind })
  else ctx.io.out(pauseText(outcome))
}

function pauseText(o: Exclude<PauseOutcome, { kind: 'asked' }>): string {
  if (o.kind === 'already_paused') return `task ${o.uuid} is already paused`
  if (o.kind === 'paused') return `task ${o.uuid} paused (resume with: ctxagent run --resume ${o.uuid})`
  return `task ${o.uuid} finished before it could pause (in completed/)`
}
