import { Command } from 'commander'
import type { Context } from '../context.js'
import { auditTask, withTaskEnv } from '../context.js'
import { NotFoundError } from '../errors.js'
import { createProgress } from '../progress.js'
import { straysWarning } from '../storage/layout.js'
import { rebuildIndex } from '../storage/reindex.js'
import { TaskIndex } from '../storage/task-index.js'
import { withContext } from './shared.js'

export function reindexCommand(): Command {
  return new Command('reindex')
    .description('rebuild tasks.db from the task directories (including gzipped tasks)')
    .action(withContext(reindex))
}

async function reindex(ctx: Context): Promise<void> {
  if (!ctx.layout.exists()) throw new NotFoundError(`there is no task tree at ${ctx.layout.base}`, 'check --home, CTXAGENT_HOME or context.base_dir')
  // The repair for a damaged index is this command: it rebuilds beside the damaged file.
  const aside = TaskIndex.setAsideIfDamaged(ctx.layout.db, ctx.now())
  if (aside) ctx.io.warn(`tasks.db was damaged; moved aside to ${aside} and rebuilt from the task directories`)
  await withTaskEnv(ctx, async (env) => {
    const progress = createProgress(ctx.io, 'reindex', !ctx.json)
    const result = await rebuildIndex(env, progress).finally(() => progress.stop())
    auditTask(ctx, 'reindex', null)
    const strays = straysWarning(ctx.layout)
    if (strays) ctx.io.warn(strays)
    if (ctx.json) {
      ctx.io.json(result)
      return
    }
    const { running, paused, completed } = result.by_location
    ctx.io.out(`indexed ${result.indexed} task(s) into ${ctx.layout.db} (running ${running}, paused ${paused}, completed ${completed})`)
    if (result.failed.length > 0) {
      ctx.io.out(`${result.failed.length} director${result.failed.length === 1 ? 'y' : 'ies'} could not be read:`)
      for (const f of result.failed) ctx.io.out(`  ${f.location}/${f.uuid}: ${f.error}`)
    }
  })
}
