import type { CommandEnv } from '../command-env.js'
import { formatBytes, formatDuration } from '../duration.js'
import type { CheckResult, StatsReport } from '../operations/stats.js'
import { costOf } from '../operations/tokens.js'
import type { TaskIndex } from '../storage/index/task-index.js'
import { barChart } from './charts.js'
import { html, num, usd } from './html.js'
import type { Safe } from './html.js'

interface Usage {
  key: string | null
  tokens: number
  prompt: number
  cached: number
  completion: number
  cost: number | null
}

/** Tokens and cost grouped by `column` (user, or the day a task was created), from the index's columns. */
export function usageBy(ctx: CommandEnv, db: TaskIndex, column: 'user' | 'day', days = 30): Usage[] {
  const key = column === 'user' ? 'user' : 'substr(created_at, 1, 10)'
  const since = column === 'day' ? `WHERE created_at >= ?` : ''
  const params = column === 'day' ? [new Date(ctx.now().getTime() - days * 86_400_000).toISOString().slice(0, 10)] : []
  const rows = db.db
    .prepare(
      `SELECT ${key} AS key, json_extract(metadata, '$.config.model') AS model, SUM(total_tokens) AS tokens, SUM(COALESCE(prompt_tokens, 0)) AS prompt,
              SUM(COALESCE(cached_tokens, 0)) AS cached, SUM(COALESCE(cache_write_tokens, 0)) AS cache_write, SUM(COALESCE(completion_tokens, 0)) AS completion
       FROM tasks ${since} GROUP BY 1, 2`,
    )
    .all(...params) as {
    key: string | null
    model: string | null
    tokens: number | null
    prompt: number
    cached: number
    cache_write: number
    completion: number
  }[]
  const out = new Map<string | null, Usage>()
  for (const r of rows) {
    const u = out.get(r.key) ?? { key: r.key, tokens: 0, prompt: 0, cached: 0, completion: 0, cost: null }
    u.tokens += r.tokens ?? 0
    u.prompt += r.prompt
    u.cached += r.cached
    u.completion += r.completion
    // Prices are per token, so the sum of a group's tokens per model prices the group.
    const cost = costOf(r.model, { prompt: r.prompt, cached: r.cached, cache_write: r.cache_write, completion: r.completion }, ctx.config.pricing)
    if (cost !== null) u.cost = Math.round(((u.cost ?? 0) + cost) * 1e6) / 1e6
    out.set(r.key, u)
  }
  const list = [...out.values()]
  return column === 'user' ? list.sort((a, b) => b.tokens - a.tokens) : list.sort((a, b) => String(a.key).localeCompare(String(b.key)))
}

/** Completed tasks by how long they took, in buckets an operator reads at a glance. */
export function durationBuckets(db: TaskIndex): { label: string; count: number }[] {
  const edges: [string, number][] = [
    ['< 1m', 60],
    ['1–5m', 300],
    ['5–15m', 900],
    ['15–60m', 3600],
    ['1–6h', 21_600],
    ['≥ 6h', Infinity],
  ]
  const rows = db.db
    .prepare(`SELECT (julianday(completed_at) - julianday(COALESCE(started_at, created_at))) * 86400.0 AS s FROM tasks WHERE completed_at IS NOT NULL`)
    .raw()
    .all() as [number | null][]
  const counts = edges.map(([label]) => ({ label, count: 0 }))
  for (const [s] of rows) {
    if (s === null || s < 0) continue
    const at = edges.findIndex(([, upTo]) => s < upTo)
    ;(counts[at] as { count: number }).count++
  }
  return counts
}

export function renderStats(ctx: CommandEnv, report: StatsReport, check: CheckResult, db: TaskIndex): Safe {
  const users = usageBy(ctx, db, 'user').slice(0, 15)
  const days = usageBy(ctx, db, 'day')
  const split = (u: Usage) => [
    { name: 'prompt (uncached)', value: Math.max(0, u.prompt - u.cached) },
    { name: 'cached', value: u.cached },
    { name: 'completion', value: u.completion },
    { name: 'unsplit', value: Math.max(0, u.tokens - u.prompt - u.completion) },
  ]
  const priced = users.some((u) => u.cost !== null)
  const t = report.tokens
  return html`<h1>Stats</h1>
<p class="status-line"><span class="status s-${check.status === 'ok' ? 'completed' : check.status === 'warning' ? 'paused' : 'failed'}">${check.status}</span> ${check.summary}</p>
${check.alerts.length === 0 ? '' : html`<ul>${check.alerts.map((a) => html`<li class="${a.level === 'critical' ? 'error' : ''}">${a.level}: ${a.message}</li>`)}</ul>`}
<div class="grid">
<section class="card"><h2>Totals</h2><dl><dt>Tasks</dt><dd>${num(report.total)} (running ${num(report.by_location.running)}, paused ${num(report.by_location.paused)}, completed ${num(report.by_location.completed)})</dd>
<dt>Tokens</dt><dd>${num(t?.total)} (prompt ${num(t?.prompt)}, cached ${num(t?.cached)}, completion ${num(t?.completion)})</dd><dt>Cost</dt><dd>${usd(t?.cost_usd ?? null)}</dd>
<dt>Disk</dt><dd>${formatBytes(report.disk.total)} (running ${formatBytes(report.disk.running)}, paused ${formatBytes(report.disk.paused)}, completed ${formatBytes(report.disk.completed)})</dd>
<dt>Average</dt><dd>${num(report.averages.messages)} messages, ${num(report.averages.tokens)} tokens, ${report.averages.duration_ms === null ? '-' : formatDuration(report.averages.duration_ms)}</dd></dl></section>
<section class="card"><h2>Outcomes</h2>${barChart(
    'Tasks by status',
    Object.entries(report.by_status).map(([status, n]) => ({ label: status, parts: [{ name: 'tasks', value: n }] })),
  )}</section>
<section class="card"><h2>Tokens by user</h2>${barChart(
    'Tokens by user',
    users.map((u) => ({ label: u.key ?? '(none)', parts: split(u) })),
  )}</section>
${
  priced
    ? html`<section class="card"><h2>Cost by user</h2>${barChart(
        'Cost by user (USD)',
        users.map((u) => ({ label: u.key ?? '(none)', parts: [{ name: 'USD', value: u.cost ?? 0 }] })),
        (n) => `$${n.toFixed(2)}`,
      )}</section>`
    : ''
}
<section class="card"><h2>Tokens per day <small>(last 30 days, by creation)</small></h2>${barChart(
    'Tokens per day',
    days.map((d) => ({ label: d.key ?? '?', parts: split(d) })),
  )}</section>
${
  days.some((d) => d.cost !== null)
    ? html`<section class="card"><h2>Cost per day</h2>${barChart(
        'Cost per day (USD)',
        days.map((d) => ({ label: d.key ?? '?', parts: [{ name: 'USD', value: d.cost ?? 0 }] })),
        (n) => `$${n.toFixed(2)}`,
      )}</section>`
    : ''
}
${spendCards(report)}
<section class="card"><h2>Durations <small>(finished tasks)</small></h2>${barChart(
    'Durations',
    durationBuckets(db).map((b) => ({ label: b.label, parts: [{ name: 'tasks', value: b.count }] })),
  )}</section>
</div>`
}

/** Spend against the caps (docs/running.md#budgets), and spend per user per day: from the index. */
function spendCards(report: StatsReport): Safe | string {
  const spend = report.spend
  if (spend === undefined || (spend.caps.length === 0 && spend.days.length === 0)) return ''
  const caps =
    spend.caps.length === 0
      ? ''
      : html`<section class="card"><h2>Spend vs caps <small>(days in ${spend.timezone})</small></h2><table class="stack"><thead><tr><th>cap</th><th>user</th><th>spent</th><th>cap</th><th>used</th><th>resets</th></tr></thead><tbody>${spend.caps.map(
          (c) =>
            html`<tr class="${c.spent >= c.limit ? 'error' : ''}"><td data-label="cap">${c.cap}</td><td data-label="user">${c.user ?? '(fleet)'}</td><td data-label="spent">${usd(c.spent)}</td><td data-label="limit">${usd(c.limit)}</td><td data-label="used">${`${(c.share * 100).toFixed(0)}%`}</td><td data-label="resets">${c.resets_at}</td></tr>`,
        )}</tbody></table></section>`
  const days = [...new Set(spend.days.map((d) => d.day))]
  const users = [...new Set(spend.days.map((d) => d.user))]
  const perDay =
    days.length === 0
      ? ''
      : html`<section class="card"><h2>Spend per user per day</h2>${barChart(
          'Spend per day (USD)',
          days.map((day) => ({
            label: day,
            parts: users.map((user) => ({ name: user, value: spend.days.find((d) => d.day === day && d.user === user)?.usd ?? 0 })),
          })),
          (n) => `$${n.toFixed(2)}`,
        )}</section>`
  return html`${caps}${perDay}`
}
