// npm run torture: the torture suites at full size (200 agents killed), then RELIABILITY.md
// with what was tried and what held. `npm test` runs the same suites smaller.
// `npm run torture -- fleet kill-run` runs only the suites named; RELIABILITY.md keeps the other rows.
import { spawnSync } from 'node:child_process'
import { existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { cpus } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'

const root = fileURLToPath(new URL('..', import.meta.url))
const results = join(root, 'test', 'torture', '.results')
rmSync(results, { recursive: true, force: true })
const runs = process.env.CTXAGENT_TORTURE_RUNS ?? '200'
const rounds = process.env.CTXAGENT_TORTURE_OPS_ROUNDS ?? '20'
const swaps = process.env.CTXAGENT_TORTURE_SWAPS ?? '10000'
const fleetTasks = process.env.CTXAGENT_TORTURE_FLEET_TASKS ?? '300'
const lockRounds = process.env.CTXAGENT_TORTURE_LOCK_ROUNDS ?? '2000'
const named = process.argv.slice(2)
for (const name of named) {
  if (!/^[a-z-]+$/.test(name) || !existsSync(join(root, 'test', 'torture', `${name}.test.ts`))) {
    process.stderr.write(`ctxagent: no torture suite ${JSON.stringify(name)} (name one of test/torture/*.test.ts without .test.ts)\n`)
    process.exit(2)
  }
}
const started = Date.now()
const vitest = spawnSync(
  process.execPath,
  [join(root, 'node_modules', 'vitest', 'vitest.mjs'), 'run', ...(named.length > 0 ? named.map((n) => `test/torture/${n}.test.ts`) : ['test/torture'])],
  {
    cwd: root,
    stdio: 'inherit',
    env: {
      ...process.env,
      CTXAGENT_TORTURE_REPORT: '1',
      // Every command line as a real process, none in the test's own (test/helpers/in-process.ts).
      CTXAGENT_TEST_SPAWN: '1',
      CTXAGENT_TORTURE_RUNS: runs,
      CTXAGENT_TORTURE_OPS_ROUNDS: rounds,
      CTXAGENT_TORTURE_SWAPS: swaps,
      CTXAGENT_TORTURE_FLEET_TASKS: fleetTasks,
      CTXAGENT_TORTURE_LOCK_ROUNDS: lockRounds,
    },
  },
)
/** What each suite does, for the table. */
const SUITES = {
  'bad-input':
    'every command and option given bad ids, paths, flags, durations, dates, counts and config files, FIFOs for files, and links and FIFOs planted in tasks: exit code, one stderr line naming the problem, tree unchanged (hashed before and after)',
  'kill-run': `${runs} \`run\` agents SIGKILLed at random instants: every complete line parses, seq continuous, half resumed to completion with well-formed requests, the rest reaped exactly once, tasks.db equal to the directories, no litter`,
  'disk-full':
    'a full tmpfs under the tree: every command that writes fails with one line saying so, reads still work, no temp file, every file readable, no task lost; all works again once there is room; a run whose disk fills mid-task pauses and resumes to completion; on a read-only mount, writes say so in one line and nothing changes (needs root)',
  'hostile-liveness':
    'waits a hostile party imposes (an MCP tools/list and an MCP tool call that never answer, an LLM request that never answers), each ended by SIGINT, `ctxagent pause` and `--timeout`: the exit code and task status that stop means',
  'hostile-tools': `every file tool called ${swaps} times while another process swaps a workspace directory for a link to an outside one (0 outside reads or writes allowed); hard links to outside files, FIFOs, the task tree inside the workspace, a catastrophic regex; run_command reading /proc/*/environ of ctxagent and an MCP-like process and spawning setsid children (no secret, nothing left after)`,
  'hostile-sandbox':
    'a hostile command as root and as an unprivileged user (setpriv), through run_command and a real `ctxagent run --allow-shell`: mount and remount, capabilities, `unshare -U`, a 0600 root file in /etc, the task tree and config, each syscall of the seccomp list (perl `syscall()`), a fork bomb, a memory hog, a file past its size, open files and a busy loop against `tools.limits`; an MCP server sandboxed as nobody',
  'hostile-usage':
    'LLM servers of both providers (OpenAI-compatible and Messages API) reporting usage negative, fractional, 1e308, 1e20, as strings and missing, under `--max-tokens`: counted by the estimate with one warning, the budget still reached; then a state.json an older version wrote with such counters: `reindex` (tasks.db and PostgreSQL), `stats --json`, `/metrics` and `/api/stats` all answer, the task reported; an index holding negative and huge sums: `/metrics` answers',
  'hostile-output':
    "a real run reading a key placed at every offset across run_command's head cut and read_file's line cut: no piece of it in any task file or LLM request, the key masked whole",
  'hostile-traces':
    "traces with span content off while a hostile model and server put the task's words in an LLM error, a tool name, a call id and a tool's error: none of them in any exported span",
  fleet: `${fleetTasks} tasks enqueued to 4 workers, 3 on simulated hosts (PID and UTS namespaces) and one on this host (2 on this host when unshare is missing), while, at points counted in agent requests, an agent, a worker (another started) and a warm child are SIGKILLed, a worker is SIGSTOPped past its liveness and SIGCONTed, PostgreSQL is killed and restarted and the LLM answers 503s, watch-locks passes running throughout: every task completed or failed with its reason, seq continuous, one final answer each, no two requests of one task at once, no job open, nothing in running/, the index equal to the tree after reindex, every file readable, no litter`,
  'lock-contention': `8 processes each taking and releasing one task's lock ${lockRounds} times, each holding an O_EXCL marker inside it that a second holder at the same moment could not create`,
  operators: `${rounds} rounds of 6 owners SIGKILLed at random while watch-locks, cleanup, unlock, compress, stats and reindex run at once and are themselves SIGKILLed 40 % of the time: after one more pass no task lost or in two places, every killed owner reaped exactly once (its error names the owner), no litter or stray lock, every file readable, tasks.db equal to the directories`,
}
const file = join(results, 'results.jsonl')
const rows = existsSync(file)
  ? readFileSync(file, 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l))
  : []
// With suites named, the rows of the others stay as the last run wrote them.
const report = join(root, 'RELIABILITY.md')
const before = named.length === 0 || !existsSync(report) ? [] : readFileSync(report, 'utf8').split('\n')
const kept = before.filter(
  (l) => /^\| [a-z-]+ \|/.test(l) && !l.startsWith('| suite |') && ![...named, ...rows.map((r) => r.suite)].some((suite) => l.startsWith(`| ${suite} |`)),
)
// The runs of the other suites are said as they were; a run of these same suites is replaced.
const lastRun = `Last run${named.length > 0 ? ` (${named.join(', ')})` : ''}`
const earlierRuns = before
  .filter((l) => l.startsWith('Last run') && !l.startsWith(`${lastRun}:`))
  .map((l) => l.replace(/^Last run(?! \()/, 'Last run (all suites)'))
const commit = spawnSync('git', ['rev-parse', '--short', 'HEAD'], { cwd: root, encoding: 'utf8' }).stdout.trim() || 'unknown'
const describe = (r) =>
  Object.entries(r)
    .filter(([k]) => k !== 'suite')
    .map(([k, v]) => `${k.replaceAll('_', ' ')}: ${v}`)
    .join(', ')
writeFileSync(
  report,
  [
    '# Reliability',
    '',
    'Written by `npm run torture` (the torture suites in `test/torture/` at full size; `npm test` runs them smaller).',
    '',
    `${lastRun}: ${new Date().toISOString().slice(0, 16)}Z, commit ${commit}, Node ${process.version}, ${cpus().length} cores, ${Math.round((Date.now() - started) / 1000)} s, vitest exit ${vitest.status}.`,
    ...earlierRuns.flatMap((l) => ['', l]),
    '',
    '| suite | what it does | result |',
    '|---|---|---|',
    ...kept,
    ...rows.map((r) => `| ${r.suite} | ${SUITES[r.suite] ?? ''} | ${describe(r)} |`),
    '',
  ].join('\n'),
)
rmSync(results, { recursive: true, force: true })
process.stderr.write(`torture: wrote RELIABILITY.md\n`)
process.exitCode = vitest.status ?? 1
