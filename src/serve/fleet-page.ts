import type { CommandEnv } from '../command-env.js'
import { formatDuration } from '../duration.js'
import type { FleetData } from './fleet-data.js'
import { ago, html, num } from './html.js'
import type { Safe } from './html.js'

/**
 * The fleet page. Sections are generic over what fleetStatus returns (every job state and
 * outcome it counts is listed), so states and fields added later show up without a change here.
 */
/** Who may act on jobs from the page, and the CSRF token its forms carry. */
export interface JobActing {
  signedIn: boolean
  csrf: string | null
}

export function renderFleet(
  ctx: CommandEnv,
  v: FleetData | null,
  why: string | null,
  acting: JobActing = { signedIn: false, csrf: null },
  notice: string | null = null,
): Safe {
  if (v === null) return html`<h1>Fleet</h1><p class="muted">${why ?? 'no fleet'}</p>`
  const jobForm = (id: number, action: 'cancel' | 'retry', label: string) =>
    html`<form method="post" action="/jobs/${String(id)}/${action}" class="action"><input type="hidden" name="csrf" value="${acting.csrf ?? ''}"><button>${label}</button></form>`
  const jobActions = (j: FleetData['recent_jobs'][number]) =>
    !acting.signedIn
      ? ''
      : j.state === 'waiting' || j.state === 'retrying' || (j.state === 'running' && !j.cancel_requested)
        ? jobForm(j.id, 'cancel', 'Cancel')
        : j.state === 'failed' || j.state === 'cancelled'
          ? jobForm(j.id, 'retry', 'Retry')
          : ''
  const s = v
  const now = ctx.now()
  const live = s.workers.filter((w) => w.live).length
  const o = s.oldest_waiting
  return html`<h1>Fleet</h1>
${notice === null ? '' : html`<p class="notice" role="status">${notice}</p>`}
<div class="grid">
<section class="card"><h2>Workers <small>${num(live)} live, ${num(s.workers.length - live)} silent</small></h2>
${
  s.workers.length === 0
    ? html`<p class="muted">no workers</p>`
    : html`<div class="scroll"><table><thead><tr><th>host</th><th>pid</th><th>state</th><th>heartbeat</th><th>started</th><th>tasks</th></tr></thead><tbody>${s.workers.map(
        (
          w,
        ) => html`<tr><td>${w.hostname}</td><td class="n">${String(w.pid)}</td><td><span class="status s-${w.live ? 'processing' : 'failed'}">${w.live ? 'live' : 'dead'}</span></td><td>${ago(w.heartbeat_at, now)} ago</td><td>${ago(w.started_at, now)} ago</td>
<td>${String(w.tasks.length)}/${String(w.concurrency)} ${w.tasks.map((t) => html`<a href="/tasks/${t}"><code>${t.slice(0, 8)}</code></a> `)}</td></tr>`,
      )}</tbody></table></div>`
}</section>
<section class="card"><h2>Jobs</h2><dl>${Object.entries(s.jobs).map(([state, n]) => html`<dt>${state}</dt><dd>${num(n)}</dd>`)}</dl>
${Object.keys(s.outcomes).length === 0 ? '' : html`<h2>Finished jobs by outcome</h2><dl>${Object.entries(s.outcomes).map(([outcome, n]) => html`<dt>${outcome}</dt><dd>${num(n)}</dd>`)}</dl>`}
<h2>Oldest waiting job</h2>${o === null ? html`<p class="muted">none</p>` : html`<p>job ${String(o.id)}, task <a href="/tasks/${o.task_uuid}"><code>${o.task_uuid.slice(0, 8)}</code></a>, waiting ${formatDuration(o.waiting_seconds * 1000)}</p>`}</section>
<section class="card"><h2>Recent job errors</h2>${v.recent_errors.length === 0 ? html`<p class="muted">none</p>` : html`<div class="scroll"><table><thead><tr><th>job</th><th>task</th><th>outcome</th><th>error</th></tr></thead><tbody>${v.recent_errors.map((e) => html`<tr><td class="n">${String(e.id)}</td><td><a href="/tasks/${e.task_uuid}"><code>${e.task_uuid.slice(0, 8)}</code></a></td><td>${e.outcome ?? '-'}</td><td class="error">${e.error}</td></tr>`)}</tbody></table></div>`}</section>
<section class="card wide"><h2>Jobs <small>the newest ${num(v.recent_jobs.length)}${acting.signedIn ? '' : '; sign in to cancel or retry'}</small></h2>${
    v.recent_jobs.length === 0
      ? html`<p class="muted">none</p>`
      : html`<div class="scroll"><table><thead><tr><th>job</th><th>state</th><th>kind</th><th>task</th><th>user</th><th>host</th><th>attempts</th><th>created</th><th>error</th><th></th></tr></thead><tbody>${v.recent_jobs.map(
          (j) =>
            html`<tr><td class="n">${String(j.id)}</td><td>${j.state}${j.waiting_for !== null ? html` <small class="wait">waiting for ${j.waiting_for}${j.wait_cap ? ` ${j.wait_cap}` : ''} until ${j.next_run_at ?? 'its reset'}</small>` : j.state === 'retrying' && j.next_run_at ? html` <small>at ${j.next_run_at.slice(11, 19)}</small>` : ''}${j.cancel_requested && j.state === 'running' ? html` <small>(cancelling)</small>` : ''}</td><td>${j.kind}</td><td><a href="/tasks/${j.task_uuid}"><code>${j.task_uuid.slice(0, 8)}</code></a></td><td>${j.user ?? '-'}</td><td>${j.host ?? '-'}</td><td class="n">${String(j.attempts)}</td><td>${ago(j.created_at, now)} ago</td>${waitOrError(j)}<td>${jobActions(j)}</td></tr>`,
        )}</tbody></table></div>`
  }</section>
<section class="card"><h2>Running tasks per user</h2>${v.running_by_user.length === 0 ? html`<p class="muted">none</p>` : html`<div class="scroll"><table><tbody>${v.running_by_user.map((u) => html`<tr><td>${u.user ?? '(none)'}</td><td class="n">${num(u.running)}</td></tr>`)}</tbody></table></div>`}</section>
</div>`
}

/**
 * A job's last error, or for a job waiting out a usage limit or a budget window the reason it waits: a planned wait
 * (docs/fleet-operations.md#waits) is no failure, so it is not shown as one.
 */
function waitOrError(j: FleetData['recent_jobs'][number]): Safe {
  return j.waiting_for === null ? html`<td class="error">${j.error ?? ''}</td>` : html`<td class="wait">${j.error ?? ''}</td>`
}
