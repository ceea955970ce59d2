import { join } from 'node:path'
import type { CommandEnv } from '../command-env.js'
import { queueAlerts } from '../fleet/queue/status.js'
import { overviewDocument } from '../operations/overview.js'
import { parseJobState } from '../fleet/queue/job-admin.js'
import { taskStatement } from '../operations/list.js'
import { checkHealth, collectStats, where } from '../operations/stats.js'
import type { CheckResult, StatsFilter, StatsReport } from '../operations/stats.js'
import { collectTokens, costOf, splitOf, taskBill } from '../operations/tokens.js'
import { FILES, isUuid, resolveTask } from '../storage/fs/layout.js'
import type { TaskRef } from '../storage/fs/layout.js'
import type { TaskIndex } from '../storage/index/task-index.js'
import { fileSize, listRecords, readOverview } from '../storage/task/reader.js'
import { STATUSES } from '../storage/task/state.js'
import { forTerminalDeep } from '../terminal-text.js'
import { serveAudit } from './actions.js'
import type { FleetSource } from './fleet-data.js'
import type { IndexSource, TaskFilter } from './data.js'
import { listedTask, taskPage } from './data.js'
import { renderFleet } from './fleet-page.js'
import { page } from './html.js'
import type { Safe } from './html.js'
import { renderTaskList } from './list-page.js'
import type { LiveFollowers } from './live.js'
import type { Exchange } from './respond.js'
import { fail, send, sendJson, sendPage } from './respond.js'
import { renderStats } from './stats-page.js'
import { reportRoute } from './report-reads.js'
import { capAlerts, collectSpend } from '../operations/spend-report.js'
import { renderTask } from './task-page.js'
import type { TaskView } from './task-page.js'

const PAGE_SIZE = 50
const TRANSCRIPT_LIMIT = 200
const FILTER_STATUSES = new Set<string>([...STATUSES, 'running', 'paused'])

class BadQuery extends Error {}

/** The read-only routes: pages and /api, each on the same core the CLI's commands read with. */
export class ReadRoutes {
  constructor(
    private readonly ctx: CommandEnv,
    private readonly index: IndexSource,
    private readonly fleet: FleetSource,
    private readonly headers: Record<string, string>,
    private readonly live: LiveFollowers,
  ) {}

  async route(x: Exchange, operator: string | null, csrf: string | null, noToken: boolean): Promise<void> {
    const path = x.url.pathname
    try {
      if (path === '/' || path === '/api/tasks') return await this.tasks(x, operator, csrf)
      const task = /^\/(api\/)?tasks\/([^/]+)(\/events)?$/.exec(path)
      if (task !== null) {
        if (!isUuid(task[2] as string)) return fail(x.res, x.api, 400, 'not a task uuid')
        if (task[3] !== undefined) return await this.events(x, task[2] as string)
        if (x.api) return await this.taskJson(x, task[2] as string, operator)
        return await this.taskPage(x, operator, csrf, noToken, null)
      }
      if (path === '/stats' || path === '/api/stats') return await this.stats(x, operator, csrf)
      if (path === '/fleet' || path === '/api/fleet') return await this.fleetPage(x, operator, csrf, null)
      if (path === '/api/jobs') return await this.jobs(x)
      if (await reportRoute(this.ctx, this.index, this.fleet, x, { operator, csrf })) return
    } catch (err) {
      if (err instanceof BadQuery) return fail(x.res, x.api, 400, err.message)
      throw err
    }
    return fail(x.res, x.api, 404, 'no such page')
  }

  private async tasks(x: Exchange, operator: string | null, csrf: string | null): Promise<void> {
    const q = x.url.searchParams
    const filter: TaskFilter = { user: text(q.get('user'), 'user'), status: text(q.get('status'), 'status'), text: text(q.get('q'), 'q') }
    if (filter.status !== undefined && !FILTER_STATUSES.has(filter.status)) throw new BadQuery(`status must be one of ${[...FILTER_STATUSES].join(', ')}`)
    const offset = whole(q.get('offset'), 'offset', 0, 10_000_000) ?? 0
    const limit = whole(q.get('limit'), 'limit', 1, 1000) ?? PAGE_SIZE
    const result = await taskPage(this.ctx, this.index, filter, offset, limit)
    if (x.api) {
      // `list --json`: one task per line; the total for paging in a header.
      const body = result.tasks.map((t) => `${JSON.stringify(listedTask(t))}\n`).join('')
      return send(x.res, 200, 'application/x-ndjson; charset=utf-8', body, { 'x-total-count': String(result.total) })
    }
    sendPage(
      x.res,
      200,
      page({
        title: 'Tasks',
        nav: 'tasks',
        operator,
        csrf,
        here: `/${x.url.search}`,
        refresh: this.ctx.config.serve.refresh_seconds,
        body: renderTaskList(this.ctx, result, filter, await this.index.choices()),
      }),
    )
  }

  private resolve(uuid: string): TaskRef {
    return resolveTask(this.ctx.layout, uuid)
  }

  private async taskJson(x: Exchange, uuid: string, operator: string | null): Promise<void> {
    const ref = this.resolve(uuid)
    const overview = await readOverview(ref)
    serveAudit(this.ctx, 'view', ref.uuid, operator ?? 'anonymous')
    sendJson(x.res, 200, overviewDocument(overview, this.ctx.config.pricing))
  }

  async taskPage(x: Exchange, operator: string | null, csrf: string | null, noToken: boolean, notice: string | null): Promise<void> {
    const uuid = /^\/(?:api\/)?tasks\/([^/]+)/.exec(x.url.pathname)?.[1] as string
    const ref = this.resolve(uuid)
    // Where the live stream continues: the file's size before the listing is read (a message
    // appended meanwhile is streamed, and skipped by seq if the listing had it too).
    const offset = fileSize(join(ref.dir, FILES.messages)) ?? 0
    const all = x.url.searchParams.get('all') === '1'
    const [overview, listing, summaries, statement] = await Promise.all([
      readOverview(ref, 0),
      listRecords(ref, 'messages', { limit: all ? null : TRANSCRIPT_LIMIT }),
      listRecords(ref, 'summaries', { limit: null }),
      taskStatement(ref.dir),
    ])
    serveAudit(this.ctx, 'view', ref.uuid, operator ?? 'anonymous')
    const split = splitOf({ total_tokens_used: overview.state?.total_tokens_used ?? 0, ...(overview.state ?? {}) })
    const view: TaskView = {
      overview,
      // The task's bill, as view and stats give it: turns, compactions, final summary (docs/running.md#budgets).
      tokens: {
        ...split,
        cost_usd:
          overview.state === null
            ? costOf(overview.metadata.config?.model, split, this.ctx.config.pricing)
            : taskBill(overview.metadata.config?.model, overview.state, this.ctx.config.pricing),
      },
      statement,
      messages: listing.records,
      hidden_before: Math.max(0, overview.counts.messages - listing.records.length),
      summaries: summaries.records,
      offset,
    }
    const body = renderTask(this.ctx, view, { signedIn: operator !== null, csrf, noToken }, notice)
    sendPage(
      x.res,
      200,
      page({ title: `Task ${ref.uuid.slice(0, 8)}`, nav: 'tasks', operator, csrf, here: `/tasks/${ref.uuid}`, body, script: overview.location === 'running' }),
    )
  }

  private async events(x: Exchange, uuid: string): Promise<void> {
    const ref = this.resolve(uuid)
    const offset = whole(x.url.searchParams.get('offset'), 'offset', 0, Number.MAX_SAFE_INTEGER) ?? fileSize(join(ref.dir, FILES.messages)) ?? 0
    const after = whole(x.url.searchParams.get('after'), 'after', 0, Number.MAX_SAFE_INTEGER) ?? 0
    if (ref.location !== 'running') {
      x.res.writeHead(200, { ...this.headers, 'content-type': 'text/event-stream; charset=utf-8' })
      x.res.end(`event: end\ndata: ${ref.location}\n\n`)
      return
    }
    await this.live.follow(ref, x.req, x.res, offset, after, this.headers)
  }

  /** `stats --json` (without its source), and the alerts of `stats --check`. */
  async statsReport(filter: StatsFilter = {}): Promise<{ report: StatsReport; check: CheckResult; db: TaskIndex }> {
    const db = await this.index.rows()
    const report = collectStats(db, this.ctx.layout, filter, this.index.kind)
    report.tokens = collectTokens(db, this.ctx.layout, where(filter), this.ctx.config.pricing)
    const check = checkHealth(report, db, this.ctx.layout, this.ctx.config, this.ctx.now())
    // Spend against the caps: the index keeps it (a scan has none).
    if (this.index.store !== null) {
      report.spend = await collectSpend(this.index.store, this.ctx.config, this.ctx.now(), filter)
      check.alerts.push(...capAlerts(report.spend, this.ctx.config.budgets.warn_at))
      check.status = check.alerts.some((a) => a.level === 'critical') ? 'critical' : check.alerts.length ? 'warning' : 'ok'
    }
    if (this.fleet.configured) {
      try {
        check.alerts.push(...queueAlerts(await this.fleet.status(), this.ctx.config.alerts.queue_wait_minutes))
      } catch (err) {
        check.alerts.push({
          level: 'critical',
          metric: 'queue_no_worker',
          value: 0,
          threshold: 0,
          message: `the fleet's database cannot be read (${(err as Error).message})`,
        })
      }
      check.status = check.alerts.some((a) => a.level === 'critical') ? 'critical' : check.alerts.length ? 'warning' : 'ok'
    }
    return { report, check, db }
  }

  private async stats(x: Exchange, operator: string | null, csrf: string | null): Promise<void> {
    const q = x.url.searchParams
    const filter: StatsFilter = { user: text(q.get('user'), 'user'), status: text(q.get('status'), 'status') }
    if (filter.status !== undefined && !(STATUSES as readonly string[]).includes(filter.status))
      throw new BadQuery(`status must be one of ${STATUSES.join(', ')}`)
    const { report, check, db } = await this.statsReport(x.api ? filter : {})
    if (x.api) {
      const { source: _source, ...data } = report
      return sendJson(x.res, 200, data)
    }
    sendPage(x.res, 200, page({ title: 'Stats', nav: 'stats', operator, csrf, here: '/stats', body: renderStats(this.ctx, report, check, db) }))
  }

  /** GET /api/jobs: `ctxagent jobs --json`'s rows (a JSON array), with its filters (state, user, task, limit). */
  private async jobs(x: Exchange): Promise<void> {
    if (!this.fleet.configured) return fail(x.res, true, 404, 'no fleet: set fleet.database_url (or CTXAGENT_DATABASE_URL)')
    const q = x.url.searchParams
    const state = text(q.get('state'), 'state')
    const filter = {
      limit: whole(q.get('limit'), 'limit', 1, 1000) ?? 50,
      ...(state !== undefined ? { state: parseJobState(state) } : {}),
      ...optional('user', text(q.get('user'), 'user')),
      ...optional('task', text(q.get('task'), 'task')),
    }
    sendJson(x.res, 200, await this.fleet.jobs(filter))
  }

  async fleetPage(x: Exchange, operator: string | null, csrf: string | null, notice: string | null): Promise<void> {
    // Only a fleet's page has something to refresh.
    const show = (body: Safe, refresh = 0) => sendPage(x.res, 200, page({ title: 'Fleet', nav: 'fleet', operator, csrf, here: '/fleet', refresh, body }))
    if (!this.fleet.configured) {
      if (x.api) return fail(x.res, true, 404, 'no fleet: set fleet.database_url (or CTXAGENT_DATABASE_URL)')
      return show(renderFleet(this.ctx, null, 'No fleet here: this tree is served from tasks.db on one host (set fleet.database_url for a fleet).'))
    }
    if (x.api) return sendJson(x.res, 200, await this.fleet.status())
    const data = await this.fleet.data(await this.index.rows())
    show(renderFleet(this.ctx, forTerminalDeep(data), null, { signedIn: operator !== null, csrf }, notice), this.ctx.config.serve.refresh_seconds)
  }
}

const optional = <K extends string>(key: K, value: string | undefined): { [P in K]?: string } =>
  value === undefined ? {} : ({ [key]: value } as { [P in K]: string })

function text(value: string | null, name: string): string | undefined {
  if (value === null || value.trim() === '') return undefined
  if (value.length > 200) throw new BadQuery(`${name} is longer than 200 characters`)
  return value.trim()
}

function whole(value: string | null, name: string, min: number, max: number): number | undefined {
  if (value === null || value === '') return undefined
  const n = Number(value)
  if (!/^\d+$/.test(value) || !Number.isSafeInteger(n) || n < min || n > max) throw new BadQuery(`${name} must be a whole number from ${min} to ${max}`)
  return n
}
