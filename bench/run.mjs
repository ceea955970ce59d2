// Runs the benchmarks (all, or those named on the command line) and writes BENCHMARKS.md.
// `--render` runs none: it writes the file again from its own data and bench/notes.md.
import { execSync } from 'node:child_process'
import { readFileSync, writeFileSync } from 'node:fs'
import { cpus, totalmem } from 'node:os'
import { join } from 'node:path'
import { DATA, remove, ROOT } from './lib.mjs'
import { mergeRows } from './merge.mjs'

const SUITES = [
  'append',
  'tail',
  'recovery',
  'operator',
  'start',
  'context',
  'turn',
  'agent',
  'chat',
  'fleet',
  'notify-listeners',
  'bill',
  'serve',
  'environment',
  'eval',
]
const wanted = process.argv.slice(2)
const suites = wanted.includes('--render') ? [] : wanted.length ? SUITES.filter((s) => wanted.includes(s)) : SUITES

const file = join(ROOT, 'BENCHMARKS.md')
const previous = readPrevious()
const results = []
// Suites run in part (their module's `partial`: CTXAGENT_BENCH_FLEET_PARTS naming some parts) replace only the rows they wrote.
const partial = new Set()
const commit = safe(() => execSync('git rev-parse --short HEAD', { cwd: ROOT }).toString().trim(), 'unknown')
const dirty = safe(() => execSync('git status --porcelain --untracked-files=no -- src bench bin', { cwd: ROOT }).toString().trim() !== '', false)
const at = new Date().toISOString().slice(0, 16) + 'Z'
try {
  for (const suite of suites) {
    process.stderr.write(`bench: ${suite}…\n`)
    const mod = await import(`./${suite}.mjs`)
    if (mod.partial === true) partial.add(suite)
    for (const r of await mod.run()) {
      results.push({ ...r, suite, commit: dirty ? `${commit}+changes` : commit, at })
      process.stderr.write(`  ${r.pass ? 'PASS' : 'FAIL'} ${r.name}: ${r.measured}; ${r.ratio} (target ${r.target})\n`)
    }
  }
} finally {
  remove(DATA)
}

const merged = mergeRows({
  previous,
  results,
  suites,
  order: SUITES,
  inPlace: (suite) => Boolean(process.env.BENCH_ROWS) || partial.has(suite),
})
// Each row says the commit it was measured at: rows kept from an earlier run describe that run's code.
const runs = [...new Set(merged.map((r) => `${r.suite} at ${r.commit ?? 'an unrecorded commit'}${r.at ? ` (${r.at})` : ''}`))]
const lines = [
  '# Benchmarks',
  '',
  'Written by `npm run bench` (`npm run bench -- <suite>` for one of: ' + SUITES.join(', ') + ').',
  'Every figure is a median of repeated runs, with its baseline measured in the same run',
  "(append, reindex, stats, view and cleanup alternate their timed runs with the baseline's,",
  'so that a drift in machine speed hits both alike),',
  'on a noisy 2-core machine: read the ratios, not the absolute times.',
  '',
  suites.length === 0
    ? lastRunLine()
    : `Last run: ${at}, commit ${commit}, Node ${process.version}, ${cpus().length} cores, ${Math.round(totalmem() / 1024 ** 3)} GiB.`,
  `Measured: ${runs.join('; ')}.`,
  '',
  '| benchmark | what | measured | against the baseline | target | result |',
  '|---|---|---|---|---|---|',
  ...merged.map((r) => `| ${r.name} | ${r.what} | ${r.measured} | ${r.ratio} | ${r.target} | ${r.pass ? 'pass' : '**FAIL**'} |`),
  '',
  // How the rows are measured and what they imply, kept by hand beside the code that measures.
  safe(() => readFileSync(join(ROOT, 'bench', 'notes.md'), 'utf8').trim() + '\n', ''),
  '<!-- data: ' + JSON.stringify(merged) + ' -->',
  '',
]
writeFileSync(file, lines.join('\n'))
process.stderr.write(`bench: wrote ${file}\n`)
if (results.some((r) => !r.pass)) process.exitCode = 1

function readPrevious() {
  const text = safe(() => readFileSync(file, 'utf8'), '')
  const match = /<!-- data: (.*) -->/.exec(text)
  // Rows written before each row carried its commit: the file's "Last run" commit.
  const last = /^Last run: (\S+), commit (\w+)/m.exec(text)
  const rows = match ? safe(() => JSON.parse(match[1]), []) : []
  return rows.map((r) => ({ commit: last?.[2], at: last?.[1], ...r }))
}

/** The previous file's "Last run" line (a render runs nothing: the last run stays the last). */
function lastRunLine() {
  return /^Last run: .*$/m.exec(safe(() => readFileSync(file, 'utf8'), ''))?.[0] ?? 'Last run: none recorded.'
}

function safe(fn, fallback) {
  try {
    return fn()
  } catch {
    return fallback
  }
}
