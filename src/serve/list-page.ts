import type { CommandEnv } from '../command-env.js'
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
  const rows = p.tasks.map(
    (t) => html`<tr>
<td><a href="/tasks/${t.uuid}"><code>${t.uuid.slice(0, 8)}</code></a></td>
<td><span class="status s-${t.status}">${t.status}</span></td>
<td>${t.user ?? '-'}</td><td>${t.model ?? '-'}</td>
<td class="n">${num(t.turns)}</td><td class="n" title="prompt ${num(t.tokens_split.prompt)}, cached ${num(t.tokens_split.cached)}, completion ${num(t.tokens_split.completion)}">${num(t.tokens)}</td>
<td class="n">${usd(t.cost_usd)}</td><td>${ago(t.created_at, now)}</td><td>${t.host ?? '-'}</td>
<td class="task">${clip(t.task || '-', 80)}</td></tr>`,
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
${p.tasks.length === 0 ? '' : html`<div class="scroll"><table class="tasks"><thead><tr><th>uuid</th><th>status</th><th>user</th><th>model</th><th>turns</th><th>tokens</th><th>cost</th><th>age</th><th>host</th><th>task</th></tr></thead><tbody>${rows}</tbody></table></div>`}
<nav class="pages">${p.offset > 0 ? html`<a href="${query({ offset: Math.max(0, p.offset - p.limit) })}" rel="prev">← newer</a>` : ''} ${last < p.total ? html`<a href="${query({ offset: p.offset + p.limit })}" rel="next">older →</a>` : ''}</nav>`
}
