import { Command } from 'commander'
import type { CommandEnv } from '../command-env.js'
import { auditTask, fleetDatabaseUrl, withTaskEnv } from '../command-env.js'
import { LockedError } from '../errors.js'
import { resolveTask } from '../storage/fs/layout.js'
import { clearLeftoverLock, killedText, oneHostRecovery, reapTask } from '../operations/reaper.js'
import { stalenessPolicy } from '../storage/task/env.js'
import { withEnv } from '../command-kit/shared.js'

interface UnlockOptions {
  force?: boolean
}

export function unlockCommand(): Command {
  return new Command('unlock')
    .description(
      'recover one task whose agent died: pause it for run --resume (recovery: resume, the default) or fail it (recovery: fail); refuses while the holder is alive',
    )
    .argument('<uuid>', 'task uuid, a unique prefix of 8+ hex characters, or last (the newest task)')
    .option('--force', 'take the task even though its holder looks alive (only when you know it is not)')
    .action(withEnv(unlock))
}

async function unlock(ctx: CommandEnv, opts: UnlockOptions, id: string): Promise<void> {
  const ref = resolveTask(ctx.layout, id)
  await withTaskEnv(ctx, async (env) => {
    // An operator's request: on this host a pid that is gone is proof enough (docs/contract.md §4).
    // recovery (docs/running.md#recovery-on-one-host): on one host a dead owner's task is paused to be resumed, by default; in a fleet watch-locks settles its job.
    const options = {
      policy: { ...stalenessPolicy(ctx.config), deadPidIsProof: true },
      force: opts.force === true,
      ...(fleetDatabaseUrl(ctx) === null ? oneHostRecovery(ctx.config.fleet.recovery) : {}),
    }
    const outcome = ref.location === 'running' ? await reapTask(env, ref, options) : await clearLeftoverLock(env, ref, options)
    if (!outcome.done) {
      if (outcome.holder !== null || ref.location === 'running') {
        const who = outcome.holder ? `pid ${outcome.holder.process_id} on ${outcome.holder.hostname}` : 'its owner'
        auditTask(ctx, 'unlock', ref.uuid, { event: 'refused', detail: `held by ${who}: ${outcome.reason}` })
        throw new LockedError(`task ${ref.uuid} is held by ${who}: ${outcome.reason}`, 'wait for it to finish, or use --force if you know it is dead')
      }
      if (ctx.json) ctx.io.json({ uuid: ref.uuid, action: 'none', reason: outcome.reason })
      else ctx.io.out(`task ${ref.uuid} (${ref.location}): ${outcome.reason}; nothing to do`)
      return
    }
    auditTask(ctx, 'unlock', ref.uuid, opts.force === true ? { event: 'forced' } : {})
    const report = outcome.report
    if (ctx.json) ctx.io.json(report)
    else
      ctx.io.out(
        `task ${ref.uuid}: ${report.action} (${report.reason}${killedText(report.killed_commands)})${report.action === 'reaped' ? '; now in completed/ as failed' : ''}`,
      )
  })
}
