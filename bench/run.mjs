// Runs the benchmarks (all, or those named on the command line) and writes BENCHMARKS.md.
import { execSync } from 'node:child_process'
import { readFileSync, writeFileSync } from 'node:fs'
import { cpus, totalmem } from 'node:os'
import { join } from 'node:path'
import { DATA, remove, ROOT } from './lib.mjs'

const SUITES = ['append', 'tail', 'recovery', 'operator', 'context', 'turn', 'agent', 'chat', 'fleet']
const wanted = process.argv.slice(2)
const suites = wanted.length ? SUITES.filter((s) => wanted.includes(s)) : SUITES

const file = join(ROOT, 'BENCHMARKS.md')
const previous = readPrevious()
const results = []
try {
  for (const suite of suites) {
    process.stderr.write(`bench: ${suite}…\n`)
    const mod = await import(`./${suite}.mjs`)
    for (const r of await mod.run()) {
      results.push({ ...r, suite })
      process.stderr.write(`  ${r.pass ? 'PASS' : 'FAIL'} ${r.name}: ${r.measured}; ${r.ratio} (target ${r.target})\n`)
    }
  }
} finally {
  remove(DATA)
}

// Rows of suites not run this time are kept from the previous file.
const merged = [...previous.filter((p) => !suites.includes(p.suite)), ...results].sort((a, b) => SUITES.indexOf(a.suite) - SUITES.indexOf(b.suite))
const commit = safe(() => execSync('git rev-parse --short HEAD', { cwd: ROOT }).toString().trim(), 'unknown')
const lines = [
  '# Benchmarks',
  '',
  'Written by `npm run bench` (`npm run bench -- <suite>` for one of: ' + SUITES.join(', ') + ').',
  'Every figure is a median of repeated runs, with its baseline measured in the same run',
  '(append, reindex, stats, view and cleanup alternate their timed runs with the baseline\'s,',
  'so that a drift in machine speed hits both alike),',
  'on a noisy 2-core machine: read the ratios, not the absolute times.',
  '',
  `Last run: ${new Date().toISOString().slice(0, 16)}Z, commit ${commit}, Node ${process.version}, ${cpus().length} cores, ${Math.round(totalmem() / 1024 ** 3)} GiB.`,
  '',
  '| benchmark | what | measured | against the baseline | target | result |',
  '|---|---|---|---|---|---|',
  ...merged.map((r) => `| ${r.name} | ${r.what} | ${r.measured} | ${r.ratio} | ${r.target} | ${r.pass ? 'pass' : '**FAIL**'} |`),
  '',
  '<!-- data: ' + JSON.stringify(merged) + ' -->',
  '',
]
writeFileSync(file, lines.join('\n'))
process.stderr.write(`bench: wrote ${file}\n`)
if (results.some((r) => !r.pass)) process.exitCode = 1

function readPrevious() {
  const text = safe(() => readFileSync(file, 'utf8'), '')
  const match = /<!-- data: (.*) -->/.exec(text)
  return match ? safe(() => JSON.parse(match[1]), []) : []
}

function safe(fn, fallback) {
  try {
    return fn()
  } catch {
    return fallback
  }
}
