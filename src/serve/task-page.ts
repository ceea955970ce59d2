import type { CommandEnv } from '../command-env.js'
import { formatDuration } from '../duration.js'
import type { TokenSplit } from '../operations/tokens.js'
import type { JsonRecord } from '../storage/format/jsonl.js'
import type { Overview } from '../storage/task/reader.js'
import { deliveryLine, deliveryOf } from '../storage/task/delivery.js'
import { environmentLine, environmentOf, instructionsLine, instructionsOf, testRunLine, testRunOf } from '../storage/task/environment-view.js'
import { ago, html, loginHref, num, type Safe, usd } from './html.js'
import { messageView } from './message-view.js'

export interface TaskView {
  overview: Overview
  tokens: TokenSplit & { cost_usd: number | null }
  statement: string
  messages: JsonRecord[]
  /** Messages before the ones shown (the page shows the newest TRANSCRIPT_LIMIT unless asked for all). */
  hidden_before: number
  summaries: JsonRecord[]
  /** Byte size of messages.jsonl when it was read: the live stream continues from there. */
  offset: number
}

/** Who may act on the task from the page, and the CSRF token the forms carry. */
export interface Acting {
  signedIn: boolean
  csrf: string | null
  /** Set when the server has no token: actions are refused, so the page says why instead of offering them. */
  noToken: boolean
}

export function renderTask(ctx: CommandEnv, v: TaskView, acting: Acting, notice: string | null): Safe {
  const o = v.overview
  const m = o.metadata
  const s = o.state
  const now = ctx.now()
  const started = s?.started_at ?? m.created_at
  const end = s?.completed_at ?? (o.location === 'running' ? now.toISOString() : null)
  const duration = end && started ? formatDuration(Math.max(0, Date.parse(end) - Date.parse(started))) : '-'
  const facts: [string, Safe | string][] = [
    ['Status', html`<span class="status s-${o.status}">${o.status}</span> (${o.location}/)`],
    ['User', m.user ?? '-'],
    ['Model', `${m.config?.model || '-'} (${m.config?.llm_provider || '-'})`],
    ['Repository', [m.task_key.task_source, m.repository].filter(Boolean).join('/') || '-'],
    ['Started', started ?? '-'],
    ['Completed', s?.completed_at ?? '-'],
    ['Duration', `${duration}${s?.completed_at ? '' : o.location === 'running' ? ' so far' : ''}`],
    ['Turns', num(s?.turns ?? s?.llm_call_count)],
    ['Owner', o.lock ? `pid ${o.lock.process_id} on ${o.lock.hostname}, heartbeat ${ago(o.lock.heartbeat_at, now)} ago` : 'none'],
  ]
  if (s?.error) facts.push(['Error', html`<span class="error">${s.error}</span>`])
  const environment = environmentOf(s)
  if (environment !== null) facts.push(['Environment', environmentLine(environment)])
  const instructions = instructionsOf(s)
  if (instructions !== null) facts.push(['Instructions', instructionsLine(instructions)])
  const tested = testRunOf(s)
  if (tested !== null) facts.push(['Test command', testRunLine(tested)])
  // Waits on the provider (docs/running.md#waits), the newest last: a wait, not an error.
  if (o.waits.length > 0)
    facts.push(['Waits', html`${o.waits.map((w, i) => html`${i > 0 ? html`<br>` : ''}<span class="when">${w.created_at}</span> ${w.plan_content}`)}`])
  const delivered = deliveryOf(s)
  if (delivered !== null)
    facts.push([
      'Delivered',
      /^https?:\/\//.test(delivered.pr?.url ?? '') && delivered.refused === null
        ? html`<a href="${delivered.pr?.url ?? ''}">${deliveryLine(delivered)}</a>`
        : deliveryLine(delivered),
    ])
  const t = v.tokens
  return html`
<h1>Task <code>${o.uuid}</code></h1>
${notice === null ? '' : html`<p class="notice" role="status">${notice}</p>`}
<section class="facts"><dl>${facts.map(([k, value]) => html`<dt>${k}</dt><dd>${value}</dd>`)}</dl>
<dl class="tokens"><dt>Tokens</dt><dd>${num(t.total)}</dd><dt>Prompt</dt><dd>${num(t.prompt)}</dd><dt>of which cached</dt><dd>${num(t.cached)}</dd><dt>Completion</dt><dd>${num(t.completion)}</dd><dt>Cost</dt><dd>${usd(t.cost_usd)}</dd><dt>Compactions</dt><dd>${num(s?.compression_count ?? o.counts.summaries)}</dd></dl></section>
${actions(o, acting)}
<h2>Statement</h2>
<pre class="statement">${v.statement || '(none)'}</pre>
<h2>Transcript <small>${num(Math.max(o.counts.messages, lastSeq(v.messages)))} messages${v.hidden_before > 0 ? html`, showing the newest ${num(v.messages.length)} · <a href="?all=1">show all</a>` : ''}</small></h2>
<ol class="transcript" id="transcript">${transcript(v.messages, v.summaries)}</ol>
${o.location === 'running' ? html`<p id="live" class="live" data-uuid="${o.uuid}" data-offset="${String(v.offset)}" data-after="${String(lastSeq(v.messages))}">live: new messages appear here as the agent writes them</p>` : ''}
${o.final_summary === null ? '' : html`<h2>Final summary</h2><pre class="final">${o.final_summary}</pre>`}
${s?.final_answer ? html`<h2>Final answer</h2><pre class="final">${s.final_answer}</pre>` : ''}`
}

function actions(o: Overview, a: Acting): Safe | string {
  // A finished task takes no action: nothing to pause, resume, tell or compress.
  if (o.location === 'completed') return ''
  if (a.noToken)
    return html`<section class="actions"><p class="muted">Actions need serve.token (or CTXAGENT_SERVE_TOKEN) set where serve runs; the CLI works meanwhile: <code>ctxagent pause ${o.uuid.slice(0, 8)}</code>.</p></section>`
  if (!a.signedIn)
    return html`<section class="actions"><p class="muted"><a href="${loginHref(`/tasks/${o.uuid}`)}">Sign in</a> to pause, resume, comment or compress.</p></section>`
  const form = (action: string, label: string, extra: Safe | string = '') =>
    html`<form method="post" action="/tasks/${o.uuid}/${action}" class="action"><input type="hidden" name="csrf" value="${a.csrf ?? ''}">${extra}<button>${label}</button></form>`
  return html`<section class="actions">
${o.location === 'running' ? form('pause', 'Pause') : ''}
${o.location === 'paused' ? form('resume', 'Resume') : ''}
${form('compress', 'Compress', html`<label><input type="checkbox" name="extractive" value="1"> extractive (no LLM)</label> `)}
${form('comment', 'Comment', html`<textarea name="text" rows="2" maxlength="100000" required placeholder="a comment for the agent"></textarea>`)}
</section>`
}

function lastSeq(messages: JsonRecord[]): number {
  return Math.max(0, ...messages.map((r) => (typeof r.seq === 'number' ? r.seq : 0)))
}

/** The messages in order, each summary marked after the last message it covers. */
function transcript(messages: JsonRecord[], summaries: JsonRecord[]): Safe[] {
  const after = new Map<number, JsonRecord[]>()
  for (const summary of summaries) {
    const end = typeof summary.end_seq === 'number' ? summary.end_seq : -1
    after.set(end, [...(after.get(end) ?? []), summary])
  }
  const shown = new Set<number>()
  const out: Safe[] = []
  for (const message of messages) {
    out.push(messageItem(message))
    const seq = typeof message.seq === 'number' ? message.seq : -1
    for (const summary of after.get(seq) ?? []) out.push(summaryItem(summary)), shown.add(seq)
  }
  // Summaries of messages before the ones shown: marked at the top.
  const earlier = summaries.filter((sm) => !shown.has(typeof sm.end_seq === 'number' ? sm.end_seq : -1))
  return [...earlier.map(summaryItem), ...out]
}

/** One message of the transcript, from its view (message-view.ts): the live script builds the same from the same view. */
export function messageItem(r: JsonRecord): Safe {
  const v = messageView(r)
  const head = html`<span class="seq">#${v.seq === null ? '?' : String(v.seq)}</span> <span class="role r-${v.kind}">${v.role}</span>${v.tool === null ? '' : html` <code>${v.tool}</code>`}${v.marks.length > 0 ? html` <span class="mark">${v.marks.join(' ')}</span>` : ''}`
  const body =
    v.result !== null
      ? html`<details><summary>${v.result.summary}</summary><pre>${v.result.text}</pre></details>`
      : v.text === ''
        ? ''
        : html`<pre>${v.text}</pre>`
  const calls = v.calls.map(
    (c) => html`<details class="call"><summary>→ <code>${c.name}</code>${c.about === null ? '' : html` ${c.about}`}</summary><pre>${c.args}</pre></details>`,
  )
  return html`<li class="${v.classes}">${head}${body}${calls}</li>`
}

function summaryItem(r: JsonRecord): Safe {
  return html`<li class="compaction"><details><summary>compaction: messages ${String(r.start_seq ?? '?')}–${String(r.end_seq ?? '?')} summarized (summary ${String(r.summary_id ?? r.id ?? '?')}, ${String(r.method ?? 'llm')}, ${num(typeof r.original_tokens === 'number' ? r.original_tokens : 0)} → ${num(typeof r.summary_tokens === 'number' ? r.summary_tokens : 0)} tokens)</summary><pre>${typeof r.summary === 'string' ? r.summary : ''}</pre></details></li>`
}
