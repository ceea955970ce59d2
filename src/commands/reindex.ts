import { Command } from 'commander'
import type { CommandEnv } from '../command-env.js'
import { auditTask, fleetDatabaseUrl, withTaskEnv } from '../command-env.js'
import { CtxError, NotFoundError } from '../errors.js'
import { createProgress } from '../progress.js'
import { straysWarning } from '../storage/fs/layout.js'
import { rebuildIndex } from '../operations/reindex.js'
import type { ReindexResult } from '../operations/reindex.js'
import { TaskIndex } from '../storage/index/task-index.js'
import { ensureLayout } from '../storage/task/lifecycle.js'
import { withEnv } from '../command-kit/shared.js'

export function reindexCommand(): Command {
  return new Command('reindex').description('rebuild tasks.db from the task directories (including gzipped tasks)').action(withEnv(reindex))
}

async function reindex(ctx: CommandEnv): Promise<void> {
  const pg = fleetDatabaseUrl(ctx) !== null
  if (!ctx.layout.exists()) {
    // A fleet's first reindex makes its shared tree (docs/contract.md §14.5); alone, a missing tree is a typo in --home.
    if (!pg) throw new NotFoundError(`there is no task tree at ${ctx.layout.base}`, 'check --home, CTXAGENT_HOME or context.base_dir')
    ensureLayout({ layout: ctx.layout, config: ctx.config, index: null, now: () => ctx.now(), warn: (m) => ctx.io.warn(m) })
    ctx.io.err(`reindex: created the task tree at ${ctx.layout.base}\n`)
  }
  // The repair for a damaged index is this command: it rebuilds beside the damaged file.
  const aside = pg ? null : TaskIndex.setAsideIfDamaged(ctx.layout.db, ctx.now())
  if (aside) ctx.io.warn(`tasks.db was damaged; moved aside to ${aside} and rebuilt from the task directories`)
  await withTaskEnv(ctx, async (env) => {
    // In a fleet the index is PostgreSQL's: one that cannot be reached is an error here, not a fallback to tasks.db.
    if (pg && env.index === null)
      throw new CtxError('the PostgreSQL index cannot be reached, so it was not rebuilt', {
        exitCode: 1,
        hint: 'check fleet.database_url or CTXAGENT_DATABASE_URL and that the server is up, then run ctxagent reindex again',
      })
    const progress = createProgress(ctx.io, 'reindex', !ctx.json)
    const result = await rebuildIndex(env, progress).finally(() => progress.stop())
    auditTask(ctx, 'reindex', null)
    // Indexed all the same, their counters as 0: said, so that an operator knows the figures are not the task's.
    for (const r of result.repaired.slice(0, 20))
      ctx.io.warn(`${r.location}/${r.uuid}: state.json has counters that are not whole numbers, indexed as ${r.counters.join(', ')}`)
    if (result.repaired.length > 20) ctx.io.warn(`${result.repaired.length - 20} more task(s) with such counters (see --json "repaired")`)
    const strays = straysWarning(ctx.layout)
    if (strays) ctx.io.warn(strays)
    if (ctx.json) ctx.io.json(result)
    else print(ctx, result, pg ? 'the PostgreSQL index' : ctx.layout.db)
    // The others are indexed; the exit status still says that some were not.
    const n = result.failed.length
    if (n > 0)
      throw new CtxError(`${n} task director${n === 1 ? 'y' : 'ies'} could not be read and ${n === 1 ? 'is' : 'are'} not in tasks.db`, {
        exitCode: 1,
        hint: ctx.json ? 'see "failed"; fix or move them, then run ctxagent reindex again' : 'listed above; fix or move them, then run ctxagent reindex again',
      })
  })
}

function print(ctx: CommandEnv, result: ReindexResult, into: string): void {
  const { running, paused, completed } = result.by_location
  ctx.io.out(`indexed ${result.indexed} task(s) into ${into} (running ${running}, paused ${paused}, completed ${completed})`)
  if (result.spend_carried_usd > 0) ctx.io.out(`carried $${result.spend_carried_usd.toFixed(2)} of spend from tasks.db into the fleet's ledger`)
  if (result.failed.length > 0) {
    ctx.io.out(`${result.failed.length} director${result.failed.length === 1 ? 'y' : 'ies'} could not be read:`)
    for (const f of result.failed) ctx.io.out(`  ${f.location}/${f.uuid}: ${f.error}`)
  }
}
