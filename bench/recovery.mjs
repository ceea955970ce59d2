// watch-locks --once over 10,000 live tasks; reindex over 10,000 completed tasks
// against a plain find + read of every metadata.json and state.json, in the same run.
import { execFileSync } from 'node:child_process'
import { hostname } from 'node:os'
import { join } from 'node:path'
import { processStart } from '../dist/storage/fs/process-info.js'
import { cloneTasks, makeRealTasks } from './real-tasks.mjs'
import { liveLock, remove, ROOT, rng, scratch, timeInterleaved, timeMedian, uuidN, writeBenchTask } from './lib.mjs'

const TASKS = 10_000
const BIN = join(ROOT, 'bin', 'ctxagent')
const ctxagent = (args) =>
  execFileSync(process.execPath, [BIN, ...args], { stdio: ['ignore', 'pipe', 'pipe'], maxBuffer: 256 * 1024 * 1024, env: { ...process.env, NO_COLOR: '1' } })

export async function run() {
  const results = []
  const base = scratch('recovery')
  const templates = scratch('recovery-templates')
  try {
    const random = rng(11)
    const lock = liveLock(process.pid, processStart(process.pid), hostname())
    for (let i = 1; i <= TASKS; i++)
      writeBenchTask(join(base, 'running', uuidN(i)), uuidN(i), random, {
        status: 'processing',
        lock,
        completedAt: null,
        messages: 4,
        created: new Date().toISOString(),
      })
    // Keep the heartbeats fresh for the whole measurement: the locks are "live".
    const watch = await timeMedian(() => {
      const out = ctxagent(['watch-locks', '--once', '--json', '--home', base]).toString()
      if (out.includes('"reaped"')) throw new Error('watch-locks reaped a live task')
    }, 5)
    results.push({
      name: 'watch-locks',
      what: `watch-locks --once over ${TASKS.toLocaleString('en')} live tasks in running/ (whole command, node start-up included)`,
      measured: `${(watch / 1000).toFixed(2)} s`,
      ratio: `${(2000 / watch).toFixed(1)}× under the limit`,
      target: '≤ 2 s',
      pass: watch <= 2000,
    })
    remove(base)

    // Completed tasks as ctxagent writes them (200 made by its own code, copied with new uuids).
    await makeRealTasks(templates, 1, 200, { index: false })
    cloneTasks(templates, base, TASKS)
    // The baseline reads what reindex reads: each task's metadata.json and state.json
    // (state.json carries the record counts, so no .jsonl file is opened).
    const [reindex, find] = await timeInterleaved(
      [
        () => ctxagent(['reindex', '--home', base]),
        () => execFileSync('sh', ['-c', `find "${base}" \\( -name metadata.json -o -name state.json \\) -print0 | xargs -0 cat > /dev/null`]),
      ],
      5,
    )
    const ratio = reindex / find
    results.push({
      name: 'reindex',
      what: `reindex over ${TASKS.toLocaleString('en')} completed tasks written by ctxagent (whole command) vs find + cat of every metadata.json and state.json (the files reindex reads)`,
      measured: `${(reindex / 1000).toFixed(2)} s (find+cat ${(find / 1000).toFixed(2)} s)`,
      ratio: `${ratio.toFixed(2)}× the baseline`,
      target: '≤ 20 s and ≤ 3× baseline',
      pass: reindex <= 20_000 && ratio <= 3,
    })
  } finally {
    remove(base)
    remove(templates)
  }
  return results
}
