import type { CommandEnv } from '../command-env.js'
import { parseIsoDate } from '../command-env.js'
import { UsageError } from '../errors.js'
import { collectOutcomes } from '../operations/outcomes.js'
import { OUTCOME_GROUPS, outcomesReport } from '../operations/outcomes-report.js'
import type { OutcomeGroup, OutcomesReport } from '../operations/outcomes-report.js'
import type { IndexSource } from './data.js'
import { evalJson } from '../eval/run-eval.js'
import { listEvals, readEval } from './eval-data.js'
import type { FleetSource } from './fleet-data.js'
import { renderEval, renderEvalList } from './eval-page.js'
import { page } from './html.js'
import type { PageOptions } from './html.js'
import { renderOutcomes } from './outcomes-page.js'
import type { Exchange } from './respond.js'
import { sendJson, sendPage } from './respond.js'

type Viewer = Pick<PageOptions, 'operator' | 'csrf'>

/**
 * The pages of what ctxagent's work came to: the pull requests it opened (`/outcomes`,
 * `stats --outcomes`'s report) and the evals of the tree (`/evals`, `eval run`'s report).
 * false: the path is none of theirs.
 */
export async function reportRoute(ctx: CommandEnv, index: IndexSource, fleet: FleetSource, x: Exchange, viewer: Viewer): Promise<boolean> {
  const path = x.url.pathname
  if (path === '/outcomes' || path === '/api/outcomes') {
    const report = await outcomes(ctx, index, x.url.searchParams)
    if (x.api) sendJson(x.res, 200, report)
    else sendPage(x.res, 200, page({ title: 'Pull requests', nav: 'outcomes', ...viewer, here: `/outcomes${x.url.search}`, body: renderOutcomes(report) }))
    return true
  }
  if (path === '/evals' || path === '/api/evals') {
    const evals = await listEvals(ctx.layout.base, fleet)
    if (x.api)
      sendJson(
        x.res,
        200,
        evals.map((e) => ('error' in e ? e : evalJson(e.report))),
      )
    else sendPage(x.res, 200, page({ title: 'Evals', nav: 'evals', ...viewer, here: '/evals', body: renderEvalList(evals) }))
    return true
  }
  const one = /^\/(?:api\/)?evals\/([^/]+)$/.exec(path)
  if (one !== null) {
    const { report, spec } = await readEval(ctx.layout.base, one[1] as string, fleet)
    if (x.api) sendJson(x.res, 200, evalJson(report))
    else sendPage(x.res, 200, page({ title: `Eval ${report.id}`, nav: 'evals', ...viewer, here: path, body: renderEval(report, spec) }))
    return true
  }
  return false
}

/** `stats --outcomes --json` for the same tree: `by` and `since` as its --by and --since (a date). */
async function outcomes(ctx: CommandEnv, index: IndexSource, q: URLSearchParams): Promise<OutcomesReport> {
  const by = q.get('by') || 'model'
  if (!(OUTCOME_GROUPS as readonly string[]).includes(by)) throw new UsageError(`by must be one of ${OUTCOME_GROUPS.join(', ')}`)
  const sinceText = q.get('since') || null
  const since = sinceText === null ? null : parseIsoDate(sinceText.slice(0, 40), { dayOnly: true })
  if (sinceText !== null && since === null) throw new UsageError('since must be a date like 2024-01-31, or an ISO time')
  return outcomesReport(collectOutcomes(await index.rows(), ctx.layout, ctx.config.pricing), by as OutcomeGroup, since)
}
