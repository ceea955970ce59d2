import type { CommandEnv } from '../command-env.js'
import { deliveryCell, deliveryResult } from '../storage/task/delivery.js'
import type { Delivery } from '../storage/task/state.js'
import { clip } from '../text.js'
import type { TaskFilter, TaskPage } from './data.js'
import { ago, html, num, usd } from './html.js'
import type { Safe } from './html.js'

const TABS: [string, string][] = [
  ['', 'All'],
  ['running', 'Running'],
  ['paused', 'Paused'],
  ['completed', 'Completed'],
  ['failed', 'Failed'],
]

export function renderTaskList(ctx: CommandEnv, p: TaskPage, filter: TaskFilter, choices: { users: string[]; statuses: string[] }): Safe {
  const now = ctx.now()
  const query = (changes: Record<string, string | number | undefined>) => {
    const params = new URLSearchParams()
    const all: Record<string, string | number | undefined> = { user: filter.user, status: filter.status, q: filter.text, ...changes }
    for (const [k, v] of Object.entries(all)) if (v !== undefined && v !== '' && String(v) !== '0') params.set(k, String(v))
    const text = params.toString()
    return text === '' ? '/' : `/?${text}`
  }
  const statusOptions = [...new Set(['running', 'paused', ...choices.statuses])]
  // Each cell names its column (data-label): on a narrow screen a row is a card of labelled lines (assets.ts, table.stack).
  const rows = p.tasks.map(
    (t) => html`<tr>
<td data-label="uuid"><a href="/tasks/${t.uuid}"><code>${t.uuid.slice(0, 8)}</code></a></td>
<td data-label="status"><span class="status s-${t.status}">${t.status}</span></td>
<td data-label="user">${t.user ?? '-'}</td><td data-label="model">${t.model ?? '-'}</td>
<td data-label="turns" class="n">${num(t.turns)}</td><td data-label="tokens" class="n" title="prompt ${num(t.tokens_split.prompt)}, cached ${num(t.tokens_split.cached)}, completion ${num(t.tokens_split.completion)}">${num(t.tokens)}</td>
<td data-label="cost" class="n">${usd(t.cost_usd)}</td><td data-label="age">${ago(t.created_at, now)}</td><td data-label="host">${t.host ?? '-'}</td>
<td data-label="delivered">${deliveredCell(t.delivery)}</td>
<td data-label="task" class="task">${clip(t.task || '-', 80)}</td></tr>`,
  )
  const last = Math.min(p.total, p.offset + p.tasks.length)
  return html`<h1>Tasks</h1>
<nav class="tabs">${TABS.map(([status, label]) => html`<a href="${query({ status })}"${(filter.status ?? '') === status ? html` aria-current="page"` : ''}>${label}</a>`)}</nav>
<form method="get" action="/" class="filters">
<label>User <select name="user"><option value="">any</option>${choices.users.map((u) => html`<option${u === filter.user ? html` selected` : ''}>${u}</option>`)}</select></label>
<label>Status <select name="status"><option value="">any</option>${statusOptions.map((s) => html`<option${s === filter.status ? html` selected` : ''}>${s}</option>`)}</select></label>
<label>Text <input type="search" name="q" value="${filter.text ?? ''}" placeholder="uuid, repository, model, error"></label>
<button>Filter</button></form>
<p class="muted">${p.total === 0 ? 'no tasks' : `${num(p.offset + 1)}–${num(last)} of ${num(p.total)}`}</p>
${p.tasks.length === 0 ? '' : html`<div class="scroll"><table class="tasks stack"><thead><tr><th>uuid</th><th>status</th><th>user</th><th>model</th><th>turns</th><th>tokens</th><th>cost</th><th>age</th><th>host</th><th>delivered</th><th>task</th></tr></thead><tbody>${rows}</tbody></table></div>`}
<nav class="pages">${p.offset > 0 ? html`<a href="${query({ offset: Math.max(0, p.offset - p.limit) })}" rel="prev">← newer</a>` : ''} ${last < p.total ? html`<a href="${query({ offset: p.offset + p.limit })}" rel="next">older →</a>` : ''}</nav>`
}

/** The delivered column (docs/serve.md#the-page): the PR linked, the branch, or why not, a refusal in red. */
function deliveredCell(d: Delivery | null): Safe | string {
  if (d === null) return '-'
  const result = deliveryResult(d)
  if (result === 'delivered' && d.pr !== null && /^https?:\/\//.test(d.pr.url)) return html`<a href="${d.pr.url}">#${String(d.pr.number)}</a>`
  const cell = deliveryCell(d)
  return result === 'refused' || result === 'failed' ? html`<span class="error" title="${d.refused ?? ''}">${cell}</span>` : cell
}
