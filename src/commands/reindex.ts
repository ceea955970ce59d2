import { Command } from 'commander'
import type { CommandEnv } from '../command-env.js'
import { auditTask, withTaskEnv } from '../command-env.js'
import { CtxError, NotFoundError } from '../errors.js'
import { createProgress } from '../progress.js'
import { straysWarning } from '../storage/fs/layout.js'
import { rebuildIndex } from '../operations/reindex.js'
import type { ReindexResult } from '../operations/reindex.js'
import { TaskIndex } from '../storage/index/task-index.js'
import { withEnv } from './shared.js'

export function reindexCommand(): Command {
  return new Command('reindex')
    .description('rebuild tasks.db from the task directories (including gzipped tasks)')
    .action(withEnv(reindex))
}

async function reindex(ctx: CommandEnv): Promise<void> {
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
    if (ctx.json) ctx.io.json(result)
    else print(ctx, result)
    // The others are indexed; the exit status still says that some were not.
    const n = result.failed.length
    if (n > 0) throw new CtxError(`${n} task director${n === 1 ? 'y' : 'ies'} could not be read and ${n === 1 ? 'is' : 'are'} not in tasks.db`, { exitCode: 1, hint: ctx.json ? 'see "failed"; fix or move them, then run ctxagent reindex again' : 'listed above; fix or move them, then run ctxagent reindex again' })
  })
}

function print(ctx: CommandEnv, result: ReindexResult): void {
  const { running, paused, completed } = result.by_location
  ctx.io.out(`indexed ${result.indexed} task(s) into ${ctx.layout.db} (running ${running}, paused ${paused}, completed ${completed})`)
  if (result.failed.length > 0) {
    ctx.io.out(`${result.failed.length} director${result.failed.length === 1 ? 'y' : 'ies'} could not be read:`)
    for (const f of result.failed) ctx.io.out(`  ${f.location}/${f.uuid}: ${f.error}`)
  }
}
