// The overhead of an eval trial beyond its task's own time (issue 42): `ctxagent eval run --demo`
// (the bundled suite, two recorded variants played back by the replay provider, the tools run for
// real: 6 trials), each round in a task tree of its own so that every trial runs. A trial's own
// time is its agent's `ctxagent run` (the trial's `duration_ms` in trials.jsonl, from the run's
// start to its end); the overhead is the rest of the eval's wall time per trial: the starting tree
// (git archive, the start patch, a commit), placing the hidden files and running the check in the
// sandbox, and the eval process's own start and report. Both are measured in the same runs, so
// the ratio is overhead per trial over own time per trial. Wall time (the check is a child in a
// sandbox), medians over CTXAGENT_BENCH_EVAL_ROUNDS rounds (default 3).
import { spawn } from 'node:child_process'
import { chmodSync, mkdirSync, readFileSync, readdirSync } from 'node:fs'
import { join } from 'node:path'
import { median, remove, ROOT, scratch } from './lib.mjs'

const BIN = join(ROOT, 'bin', 'ctxagent')
const ROUNDS = Number(process.env.CTXAGENT_BENCH_EVAL_ROUNDS ?? 3)
const LIMIT = 1

function evalRun(home, work) {
  mkdirSync(home)
  return new Promise((resolve, reject) => {
    const start = process.hrtime.bigint()
    const child = spawn(process.execPath, [BIN, '--home', home, '--json', 'eval', 'run', '--demo', '--work-dir', work], { stdio: ['ignore', 'pipe', 'pipe'] })
    let out = ''
    let err = ''
    child.stdout.on('data', (d) => (out += d))
    child.stderr.on('data', (d) => (err += d))
    child.on('exit', (code) => {
      const wall = Number(process.hrtime.bigint() - start) / 1e6
      if (code !== 0) return reject(new Error(`eval run --demo: exit ${code}: ${err.slice(-500)}`))
      const evals = join(home, 'evals')
      const id = readdirSync(evals)[0]
      const trials = readFileSync(join(evals, id, 'trials.jsonl'), 'utf8')
        .split('\n')
        .filter(Boolean)
        .map((l) => JSON.parse(l))
      const own = trials.reduce((a, t) => a + t.duration_ms, 0)
      resolve({ wall, own, trials: trials.length, passed: JSON.parse(out).variants.map((v) => v.solved) })
    })
  })
}

export async function run() {
  const dir = scratch('eval')
  // As root, the checks run as another user, who must reach the trials' workspaces below it.
  chmodSync(dir, 0o711)
  try {
    const rounds = []
    for (let i = 0; i < ROUNDS; i++) rounds.push(await evalRun(join(dir, `home-${i}`), join(dir, `work-${i}`)))
    const trials = rounds[0].trials
    const perTrialOwn = median(rounds.map((r) => r.own / r.trials))
    const perTrialOverhead = median(rounds.map((r) => (r.wall - r.own) / r.trials))
    const ratio = perTrialOverhead / perTrialOwn
    return [
      {
        name: 'eval-trial-overhead',
        what: `ctxagent eval run --demo (${trials} trials: 3 tasks × 2 recorded variants, replayed LLM, tools and checks run for real), a fresh tree each round; overhead per trial = (the eval's wall time − its trials' own run time) / trials: starting tree, hidden files, the check in the sandbox, the eval's own start and report; ${ROUNDS} rounds, medians`,
        measured: `${perTrialOverhead.toFixed(0)} ms a trial beyond its task's own ${perTrialOwn.toFixed(0)} ms (eval wall ${median(rounds.map((r) => r.wall)).toFixed(0)} ms; solved ${rounds[0].passed.join(' and ')})`,
        ratio: `${ratio.toFixed(2)}× the task's own time`,
        target: `≤ ${LIMIT}× the task's own time`,
        pass: ratio <= LIMIT,
      },
    ]
  } finally {
    remove(dir)
  }
}
