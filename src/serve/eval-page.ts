import type { PairedReport, Trial, VariantReport } from '../eval/report.js'
import type { EvalReport } from '../eval/run-eval.js'
import type { EvalSpec } from '../eval/store.js'
import { isUuid } from '../storage/fs/layout.js'
import { intervalChart, labelledChart } from './charts.js'
import type { ListedEval } from './eval-data.js'
import { html, num } from './html.js'
import type { Safe } from './html.js'

// The evals of the tree on the page (docs/eval.md#on-the-page): the figures of `eval run --json`, from the same report.

const pct = (x: number): string => `${(x * 100).toFixed(1)}%`
const points = (x: number): string => `${x >= 0 ? '+' : '−'}${Math.abs(x * 100).toFixed(1)}`
const dollars = (x: number | null, digits = 4): string => (x === null ? '-' : `$${x.toFixed(digits)}`)
const signedUsd = (x: number): string => `${x >= 0 ? '+' : '−'}$${Math.abs(x).toFixed(4)}`
const endings = (v: VariantReport): string =>
  Object.entries(v.endings)
    .map(([status, n]) => `${status} ${n}`)
    .join(', ') || '-'

export function renderEvalList(evals: readonly ListedEval[]): Safe {
  if (evals.length === 0)
    return html`<h1>Evals</h1><p class="muted">No eval in this tree yet: <code>ctxagent eval run --demo</code> makes one (docs/eval.md).</p>`
  const rows = evals.map((e) =>
    'error' in e
      ? html`<tr><td data-label="eval"><code>${e.id}</code></td><td data-label="suite" class="error" colspan="5">cannot be read: ${e.error}</td></tr>`
      : html`<tr><td data-label="eval"><a href="/evals/${e.id}"><code>${e.id}</code></a></td><td data-label="suite">${suiteName(e.spec)}</td><td data-label="created">${e.spec.created_at.slice(0, 16).replace('T', ' ')}</td><td data-label="tasks" class="n">${num(e.spec.tasks.length)} × ${num(e.spec.runs)}</td><td data-label="variants">${e.report.variants.map((v, i) => html`${i > 0 ? ', ' : ''}${v.name} ${pct(v.pass_at_1)}`)}</td><td data-label="trials" class="n">${num(trialCount(e.report))}${e.report.remaining > 0 ? html` <span class="muted">(${num(e.report.remaining)} not run)</span>` : ''}</td></tr>`,
  )
  return html`<h1>Evals</h1>
<div class="scroll"><table class="stack evals"><thead><tr><th>eval</th><th>suite</th><th>created</th><th>tasks × runs</th><th>pass@1</th><th>trials</th></tr></thead><tbody>${rows}</tbody></table></div>`
}

export function renderEval(report: EvalReport, spec: EvalSpec): Safe {
  const runs = report.runs
  const passChart = labelledChart(
    'pass@1 by variant',
    report.variants.map((v) => ({
      label: v.name,
      figure: `${pct(v.pass_at_1)} · ${v.solved}/${v.count} solved`,
      parts: [
        { name: 'passed', value: v.pass_at_1, colour: '#137a3a' },
        { name: 'failed', value: v.count === 0 ? 0 : 1 - v.pass_at_1, colour: '#e4e7ec' },
      ],
    })),
    pct,
  )
  return html`<h1>Eval <code>${report.id}</code></h1>
<div class="facts"><dl><dt>Suite</dt><dd>${report.suite}</dd><dt>Created</dt><dd>${spec.created_at}</dd>
<dt>Tasks</dt><dd>${num(report.tasks.length)} × ${num(report.variants.length)} variant(s) × ${num(runs)} run(s)</dd>
<dt>Trials</dt><dd>${num(trialCount(report))} recorded${report.remaining > 0 ? `, ${num(report.remaining)} not run yet (the same eval run command runs them)` : ''}</dd>
<dt>Results</dt><dd><code>${report.dir}/trials.jsonl</code></dd></dl></div>
<div class="grid">
<section class="card"><h2>pass@1</h2>${passChart}</section>
<section class="card"><h2>Paired comparison <small>(95 % interval, paired bootstrap over tasks)</small></h2>${paired(report.paired)}</section>
<section class="card wide"><h2>Variants</h2>${variantsTable(report.variants, runs)}</section>
<section class="card wide"><h2>Trials</h2>${trialsTable(report.variants.flatMap((v) => v.trials_list))}</section>
</div>`
}

function variantsTable(variants: readonly VariantReport[], runs: number): Safe {
  const ks = runs > 1 ? Array.from({ length: runs }, (_, i) => String(i + 1)).slice(1) : []
  return html`<div class="scroll"><table class="stack variants"><thead><tr><th>variant</th><th>pass@1</th>${ks.map((k) => html`<th>pass@${k}</th>`)}<th>solved</th><th>$ / task</th><th>$ / solved</th><th>tokens / task</th><th>turns / task</th><th>time / task</th><th>ended</th></tr></thead><tbody>${variants.map(
    (v) =>
      html`<tr data-variant="${v.name}"><td data-label="variant">${v.name}</td><td data-label="pass@1" class="n">${pct(v.pass_at_1)}</td>${ks.map((k) => html`<td data-label="pass@${k}" class="n">${v.pass_at_k[k] === undefined ? '-' : pct(v.pass_at_k[k])}</td>`)}<td data-label="solved" class="n">${num(v.solved)}/${num(v.count)}</td><td data-label="$/task" class="n">${dollars(v.usd_per_task)}</td><td data-label="$/solved" class="n">${dollars(v.usd_per_solved)}</td><td data-label="tokens" class="n">${num(Math.round(v.tokens_per_task))}</td><td data-label="turns" class="n">${v.turns_per_task.toFixed(1)}</td><td data-label="time" class="n">${v.seconds_per_task.toFixed(1)}s</td><td data-label="ended">${endings(v)}</td></tr>`,
  )}</tbody></table></div>`
}

function paired(pairs: readonly PairedReport[]): Safe {
  if (pairs.length === 0) return html`<p class="muted">one variant: nothing to compare with</p>`
  const spread = Math.max(0, ...pairs.flatMap((p) => [Math.abs(p.usd_ci95[0]), Math.abs(p.usd_ci95[1]), Math.abs(p.usd_diff)]))
  return html`${pairs.map(
    (p) =>
      html`<p class="pair" data-pair="${p.a}-${p.b}"><strong>${p.a} − ${p.b}</strong> over ${num(p.tasks)} task(s): pass rate <span data-figure="pass_diff">${points(p.pass_diff)}</span> points (95 % CI <span data-figure="ci95">${points(p.ci95[0])} to ${points(p.ci95[1])}</span>); $ per task <span data-figure="usd_diff">${signedUsd(p.usd_diff)}</span> (95 % CI ${signedUsd(p.usd_ci95[0])} to ${signedUsd(p.usd_ci95[1])})</p>`,
  )}
${intervalChart(
  'Difference in pass rate, points',
  pairs.map((p) => ({ label: `${p.a} − ${p.b}`, value: p.pass_diff, low: p.ci95[0], high: p.ci95[1] })),
  -1,
  1,
  points,
)}
${
  spread < 0.00005
    ? html`<p class="muted">No money to compare: every trial cost $0 (the replay provider reports no usage, or no price is configured).</p>`
    : intervalChart(
        'Difference in $ per task',
        pairs.map((p) => ({ label: `${p.a} − ${p.b} ($)`, value: p.usd_diff, low: p.usd_ci95[0], high: p.usd_ci95[1] })),
        -spread,
        spread,
        signedUsd,
      )
}`
}

function trialsTable(trials: readonly Trial[]): Safe {
  if (trials.length === 0) return html`<p class="muted">no trial finished yet</p>`
  return html`<div class="scroll"><table class="stack trials"><thead><tr><th>variant</th><th>task</th><th>run</th><th>check</th><th>task ended</th><th>$</th><th>tokens</th><th>turns</th><th>time</th></tr></thead><tbody>${trials.map(
    (t) =>
      html`<tr><td data-label="variant">${t.variant}</td><td data-label="task">${t.uuid !== null && isUuid(t.uuid) ? html`<a href="/tasks/${t.uuid}">${t.task}</a>` : t.task}</td><td data-label="run" class="n">${num(t.run)}</td><td data-label="check">${verdict(t)}</td><td data-label="ended">${t.status}</td><td data-label="$" class="n">${dollars(t.usd)}</td><td data-label="tokens" class="n">${num(t.tokens)}</td><td data-label="turns" class="n">${num(t.turns)}</td><td data-label="time" class="n">${(t.duration_ms / 1000).toFixed(1)}s</td></tr>`,
  )}</tbody></table></div>`
}

/** Passed or failed; a trial whose fleet job ended without a verdict (`no_verdict`, `job_…`) says so, with why. */
function verdict(t: Trial): Safe {
  if (t.status === 'no_verdict' || t.status.startsWith('job_'))
    return html`<span class="status s-paused" title="${t.check?.tail ?? 'its job ended without a verdict'}">no verdict</span>`
  return html`<span class="status ${t.passed ? 's-completed' : 's-failed'}" title="${t.check === null ? 'no check ran' : `exit ${t.check.exit_code ?? '-'}`}">${t.passed ? 'passed' : 'failed'}</span>`
}

function trialCount(report: EvalReport): number {
  return report.variants.reduce((n, v) => n + v.count, 0)
}

function suiteName(spec: EvalSpec): string {
  return spec.suite.split('/').filter(Boolean).slice(-2).join('/')
}
