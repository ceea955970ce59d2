import { InvalidArgumentError } from 'commander'
import type { CommandEnv } from '../../command-env.js'
import { auditTask, openIndex } from '../../command-env.js'
import { UsageError } from '../../errors.js'
import { table } from '../../render.js'
import { collectOutcomes } from '../../operations/outcomes.js'
import { OUTCOME_GROUPS, outcomesReport } from '../../operations/outcomes-report.js'
import type { OutcomeFigures, OutcomeGroup, OutcomesReport } from '../../operations/outcomes-report.js'
import { refreshOutcomes } from '../../operations/outcomes-refresh.js'
import type { RefreshReport } from '../../operations/outcomes-refresh.js'
import { usd } from '../../operations/budgets.js'

export interface OutcomesOptions {
  outcomes?: boolean
  refresh?: boolean
  by?: OutcomeGroup
  since?: Date
}

/** --by: one of the groups. */
export function outcomeGroup(value: string): OutcomeGroup {
  if ((OUTCOME_GROUPS as readonly string[]).includes(value)) return value as OutcomeGroup
  throw new InvalidArgumentError(`must be one of ${OUTCOME_GROUPS.join(', ')}`)
}

/** The flags that only --outcomes takes, and the ones it does not, refused before anything is read. */
export function checkOutcomeOptions(opts: OutcomesOptions & { check?: boolean; user?: string; from?: Date; to?: Date; status?: string }): void {
  if (!opts.outcomes) {
    const only = (['refresh', 'by', 'since'] as const).filter((k) => opts[k] !== undefined).map((k) => `--${k}`)
    if (only.length > 0) throw new UsageError(`${only.join(', ')} ${only.length > 1 ? 'go' : 'goes'} with --outcomes`, 'add --outcomes')
    return
  }
  const others = (['check', 'user', 'from', 'to', 'status'] as const).filter((k) => opts[k] !== undefined).map((k) => `--${k}`)
  if (others.length > 0)
    throw new UsageError(
      `--outcomes does not take ${others.join(', ')}`,
      'narrow the pull requests with --since and group them with --by model|repository|user|label',
    )
}

/**
 * `stats --outcomes` (docs/contract.md §17): the fate of every pull/merge request ctxagent
 * opened, from the index; with --refresh, the forge's facts are fetched first.
 */
export async function statsOutcomes(ctx: CommandEnv, opts: OutcomesOptions): Promise<void> {
  const store = await openIndex(ctx, opts.refresh === true)
  if (store === null) {
    ctx.io.warn(`no tasks.db under ${ctx.layout.base}: no pull request is recorded (run ctxagent reindex, then stats --outcomes --refresh)`)
    return print(ctx, outcomesReport([], opts.by ?? 'model', opts.since ?? null), null)
  }
  try {
    let refresh: RefreshReport | null = null
    if (opts.refresh) {
      refresh = await refreshOutcomes(store, ctx.layout, ctx.config, { now: ctx.now() })
      for (const line of refresh.errors) ctx.io.warn(`not refreshed: ${line}`)
    }
    const { db, owned } = await store.reporting()
    let report: OutcomesReport
    try {
      report = outcomesReport(collectOutcomes(db, ctx.layout, ctx.config.pricing), opts.by ?? 'model', opts.since ?? null)
    } finally {
      if (!owned) db.close()
    }
    auditTask(ctx, opts.refresh ? 'stats --outcomes --refresh' : 'stats --outcomes', null)
    print(ctx, report, refresh)
  } finally {
    await store.close()
  }
}

function print(ctx: CommandEnv, report: OutcomesReport, refresh: RefreshReport | null): void {
  if (ctx.json) return ctx.io.json({ ...report, ...(refresh ? { refresh } : {}) })
  const head = [report.by, 'opened', 'merged', 'closed', 'open', 'merge rate', 'median to merge', 'rounds/merged', '$/merged', 'reworked']
  const row = (key: string, f: OutcomeFigures) => [
    key,
    f.opened,
    f.merged,
    f.closed,
    f.open,
    f.merge_rate === null ? '-' : `${(f.merge_rate * 100).toFixed(1)}%`,
    f.median_hours_to_merge === null ? '-' : `${f.median_hours_to_merge.toFixed(1)}h`,
    f.rounds_per_merged === null ? '-' : f.rounds_per_merged.toFixed(2),
    f.usd_per_merged === null ? '-' : usd(f.usd_per_merged),
    f.reworked,
  ]
  const lines = [
    `Pull requests ctxagent opened${report.since ? ` since ${report.since.slice(0, 10)}` : ''}: ${report.total.opened}`,
    `Merge rate: merged / (merged + closed), the ${report.total.merged + report.total.closed} that reached an end; ${report.total.open} still open, counted apart`,
    table(ctx.io, head, [...report.groups.map((g) => row(g.key ?? '-', g)), row('all', report.total)]),
  ]
  if (refresh !== null)
    lines.push(`Refreshed ${refresh.refreshed.length} from the forge (${refresh.ended} already ended, ${refresh.errors.length} not answered)`)
  ctx.io.out(lines.join('\n'))
}
