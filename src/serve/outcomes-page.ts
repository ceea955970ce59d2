import { OUTCOME_GROUPS } from '../operations/outcomes-report.js'
import type { OutcomeFigures, OutcomesReport } from '../operations/outcomes-report.js'
import type { PullOutcome } from '../operations/outcomes.js'
import { isUuid } from '../storage/fs/layout.js'
import { labelledChart } from './charts.js'
import { html, num, usd } from './html.js'
import type { Safe } from './html.js'

const COLOURS = { merged: '#137a3a', closed: '#b42318', open: '#98a2b3' } as const

/** The newest requests listed under the figures; the rest are in /api/outcomes. */
const LISTED = 100

const percent = (rate: number | null): string => (rate === null ? '-' : `${(rate * 100).toFixed(1)}%`)
const hours = (h: number | null): string => (h === null ? '-' : `${h.toFixed(1)}h`)
const rounds = (r: number | null): string => (r === null ? '-' : r.toFixed(2))

/**
 * The fate of the pull/merge requests ctxagent opened (docs/contract.md §17): the figures
 * `stats --outcomes --json` gives for the same tree, grouped the same way, with a chart.
 */
export function renderOutcomes(report: OutcomesReport): Safe {
  const t = report.total
  const chartRows = [...report.groups.map((g) => ({ key: g.key ?? '(unknown)', f: g as OutcomeFigures })), { key: 'all', f: t }].map(({ key, f }) => ({
    label: key,
    figure: `${percent(f.merge_rate)} of ${num(f.merged + f.closed)} ended`,
    parts: [
      { name: 'merged', value: f.merged, colour: COLOURS.merged },
      { name: 'closed', value: f.closed, colour: COLOURS.closed },
      { name: 'still open', value: f.open, colour: COLOURS.open, apart: true },
    ],
  }))
  const money = report.groups.filter((g) => g.usd_per_merged !== null)
  return html`<h1>Pull requests</h1>
<form method="get" action="/outcomes" class="filters">
<label>By <select name="by">${OUTCOME_GROUPS.map((g) => html`<option${g === report.by ? html` selected` : ''}>${g}</option>`)}</select></label>
<label>Opened since <input type="date" name="since" value="${report.since?.slice(0, 10) ?? ''}"></label>
<button>Show</button></form>
<p class="denominator">Merge rate is merged ÷ (merged + closed): of the <strong>${num(t.merged + t.closed)}</strong> that reached an end. The <strong>${num(t.open)}</strong> still open are counted apart, not as failures.</p>
<div class="grid">
<section class="card"><h2>Totals</h2><dl class="outcome-totals">
<dt>Opened</dt><dd data-figure="opened">${num(t.opened)}</dd><dt>Merged</dt><dd data-figure="merged">${num(t.merged)}</dd>
<dt>Closed unmerged</dt><dd data-figure="closed">${num(t.closed)}</dd><dt>Still open</dt><dd data-figure="open">${num(t.open)}</dd>
<dt>Merge rate</dt><dd data-figure="merge_rate">${percent(t.merge_rate)}</dd><dt>Median to merge</dt><dd data-figure="median_hours_to_merge">${hours(t.median_hours_to_merge)}</dd>
<dt>Rounds per merged</dt><dd data-figure="rounds_per_merged">${rounds(t.rounds_per_merged)}</dd><dt>$ per merged</dt><dd data-figure="usd_per_merged">${usd(t.usd_per_merged)}</dd>
<dt>Money by outcome</dt><dd>merged ${usd(t.usd.merged)}, closed ${usd(t.usd.closed)}, open ${usd(t.usd.open)}</dd>
<dt>Reworked</dt><dd>${num(t.reworked)} merged with people's own commits</dd></dl></section>
<section class="card"><h2>Outcomes by ${report.by}</h2>${labelledChart(`Pull requests by ${report.by}: merged, closed, still open`, chartRows)}</section>
${
  money.length === 0
    ? ''
    : html`<section class="card"><h2>$ per merged by ${report.by}</h2>${labelledChart(
        `USD per merged pull request by ${report.by}`,
        money.map((g) => ({
          label: g.key ?? '(unknown)',
          figure: usd(g.usd_per_merged),
          parts: [{ name: 'USD per merged', value: g.usd_per_merged ?? 0, colour: '#2457c5' }],
        })),
        usd,
      )}</section>`
}
<section class="card wide"><h2>By ${report.by}</h2>${figuresTable(report)}</section>
<section class="card wide"><h2>Requests <small>${report.pull_requests.length > LISTED ? `(the newest ${LISTED} of ${report.pull_requests.length})` : ''}</small></h2>${pullsTable(report.pull_requests)}</section>
</div>`
}

function figuresTable(report: OutcomesReport): Safe {
  const row = (key: string, f: OutcomeFigures) =>
    html`<tr data-group="${key}"><td data-label="${report.by}">${key}</td><td data-label="opened" class="n">${num(f.opened)}</td><td data-label="merged" class="n">${num(f.merged)}</td><td data-label="closed" class="n">${num(f.closed)}</td><td data-label="open" class="n">${num(f.open)}</td><td data-label="merge rate" class="n">${percent(f.merge_rate)}</td><td data-label="to merge" class="n">${hours(f.median_hours_to_merge)}</td><td data-label="rounds" class="n">${rounds(f.rounds_per_merged)}</td><td data-label="$/merged" class="n">${usd(f.usd_per_merged)}</td><td data-label="reworked" class="n">${num(f.reworked)}</td></tr>`
  return html`<div class="scroll"><table class="stack outcomes"><thead><tr><th>${report.by}</th><th>opened</th><th>merged</th><th>closed</th><th>still open</th><th>merge rate</th><th>median to merge</th><th>rounds / merged</th><th>$ / merged</th><th>reworked</th></tr></thead><tbody>${report.groups.map((g) => row(g.key ?? '(unknown)', g))}${row('all', report.total)}</tbody></table></div>`
}

function pullsTable(pulls: readonly PullOutcome[]): Safe {
  if (pulls.length === 0) return html`<p class="muted">no pull request opened yet</p>`
  const newest = [...pulls].reverse().slice(0, LISTED)
  return html`<div class="scroll"><table class="stack pulls"><thead><tr><th>request</th><th>outcome</th><th>opened</th><th>by task</th><th>model</th><th>rounds</th><th>cost</th></tr></thead><tbody>${newest.map(
    (p) =>
      html`<tr><td data-label="request">${/^https?:\/\//.test(p.url) ? html`<a href="${p.url}">${p.repository ?? p.url}${p.number === null ? '' : ` #${p.number}`}</a>` : p.url}</td><td data-label="outcome"><span class="status o-${p.outcome}">${p.outcome}</span></td><td data-label="opened">${p.opened_at.slice(0, 10)}</td><td data-label="task">${isUuid(p.task) ? html`<a href="/tasks/${p.task}"><code>${p.task.slice(0, 8)}</code></a>` : p.task}</td><td data-label="model">${p.model ?? '-'}</td><td data-label="rounds" class="n">${num(p.rounds)}</td><td data-label="cost" class="n">${usd(p.usd)}</td></tr>`,
  )}</tbody></table></div>`
}
