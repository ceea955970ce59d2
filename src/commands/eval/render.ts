import type { TaskVerdict } from '../../eval/check-suite.js'
import type { Trial } from '../../eval/report.js'
import type { EvalReport } from '../../eval/run-eval.js'
import type { Io } from '../../io.js'
import { table } from '../../render.js'
import { forTerminal } from '../../terminal-text.js'

// How `eval` shows a suite's check and an eval's report on a terminal (docs/eval.md#the-report).

export function renderChecks(verdicts: readonly TaskVerdict[], io: Io): string {
  const rows = verdicts.map((v) => [
    v.task,
    v.ok ? io.chalk.green('usable') : io.chalk.red('left out'),
    v.ok ? (v.solution ? 'fails at the start, passes with solution.patch' : 'fails at the start (no solution.patch)') : forTerminal(v.why),
  ])
  const usable = verdicts.filter((v) => v.ok).length
  return `${table(io, ['task', 'verdict', 'why'], rows)}\n${usable} of ${verdicts.length} task(s) usable`
}

export function trialLine(t: Trial, done: number, total: number): string {
  return `[${done}/${total}] ${t.variant} ${t.task} #${t.run}: ${t.passed ? 'passed' : 'failed'} (task ${t.status}, $${t.usd.toFixed(4)}, ${t.turns} turn(s))`
}

const pct = (x: number): string => `${(x * 100).toFixed(1)} %`
const usd = (x: number | null): string => (x === null ? '-' : `$${x.toFixed(4)}`)

export function renderReport(r: EvalReport, io: Io): string {
  const head = ['variant', 'pass@1', 'solved', '$/task', '$/solved', 'tokens/task', 'turns/task', 's/task', 'ended']
  const rows = r.variants.map((v) => [
    v.name,
    pct(v.pass_at_1),
    `${v.solved}/${v.count}`,
    usd(v.usd_per_task),
    usd(v.usd_per_solved),
    Math.round(v.tokens_per_task),
    v.turns_per_task.toFixed(1),
    v.seconds_per_task.toFixed(1),
    Object.entries(v.endings)
      .map(([status, n]) => `${status} ${n}`)
      .join(', '),
  ])
  const lines = [`eval ${r.id}: ${r.tasks.length} task(s) × ${r.variants.length} variant(s) × ${r.runs} run(s); ${r.suite}`, table(io, head, rows)]
  if (r.runs > 1)
    for (const v of r.variants)
      lines.push(
        `${v.name}: ${Object.entries(v.pass_at_k)
          .map(([k, p]) => `pass@${k} ${pct(p)}`)
          .join(', ')}`,
      )
  for (const p of r.paired)
    lines.push(
      `${p.a} − ${p.b} over ${p.tasks} task(s): pass rate ${signed(p.pass_diff * 100)} points (95 % CI ${signed(p.ci95[0] * 100)} to ${signed(p.ci95[1] * 100)}), $/task ${signed(p.usd_diff, 4)} (95 % CI ${signed(p.usd_ci95[0], 4)} to ${signed(p.usd_ci95[1], 4)}); paired bootstrap over tasks`,
    )
  lines.push(`results: ${r.dir}/trials.jsonl`)
  return lines.join('\n')
}

function signed(x: number, digits = 1): string {
  return `${x >= 0 ? '+' : '−'}${Math.abs(x).toFixed(digits)}`
}
