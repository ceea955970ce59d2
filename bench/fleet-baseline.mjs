// The fleet against graphile-worker 0.17 (issue 29), on the same PostgreSQL in the same run:
// enqueue → the task's first LLM request, and tasks a minute at 1, 4 and 16 at a time, with
// the baseline a graphile-worker process whose one task runs `node bin/ctxagent run` per job
// (bench/graphile-runner.mjs); and the `ctxagent enqueue` command's wall time against
// `psql -c 'select 1'`, split into node's start-up, the bundle's load and the rest.
//
// Sizes (environment): CTXAGENT_BENCH_FLEET_GW_DISPATCHES (20 each, alternating),
// CTXAGENT_BENCH_FLEET_GW_TASKS (32 tasks at each concurrency), CTXAGENT_BENCH_FLEET_ENQUEUES (15 each).
import { execFileSync, spawn } from 'node:child_process'
import { existsSync, readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import pg from 'pg'
import { median, remove, ROOT } from './lib.mjs'
import { cli, childEnv, now, percentile, setup, sleep, startWorker, treeCpuMs, truncateJobs, waitDone } from './fleet-lib.mjs'

const DISPATCHES = Number(process.env.CTXAGENT_BENCH_FLEET_GW_DISPATCHES ?? 20)
const TASKS = Number(process.env.CTXAGENT_BENCH_FLEET_GW_TASKS ?? 32)
const ENQUEUES = Number(process.env.CTXAGENT_BENCH_FLEET_ENQUEUES ?? 15)
/** Both workers idle this long before each measured enqueue: their listening and warm processes settled. */
const IDLE_MS = 1500
const ms = (v) => `${Math.round(v)} ms`
const say = (line) => process.stderr.write(`  fleet: ${line}\n`)

/** graphile-worker in a process of its own, `concurrency` jobs at a time; resolves once it runs. */
async function startGraphile(db, env, concurrency) {
  const child = spawn(process.execPath, [join(ROOT, 'bench', 'graphile-runner.mjs')], {
    env: childEnv({ ...env, GW_DATABASE_URL: db, GW_CONCURRENCY: String(concurrency) }),
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  const done = []
  let err = ''
  let rest = ''
  let ready = false
  child.stderr.on('data', (d) => (err += d))
  child.stdout.on('data', (d) => {
    const parts = (rest + d).split('\n')
    rest = parts.pop()
    for (const line of parts) {
      if (line === 'ready') ready = true
      const m = /^done (\S+) (\S+) (\d+)$/.exec(line)
      if (m) done.push({ tag: m[1], code: m[2], most: Number(m[3]), at: now() })
    }
  })
  for (const until = Date.now() + 60_000; !ready; ) {
    if (Date.now() > until || child.exitCode !== null) throw new Error(`graphile-worker did not start:\n${err}`)
    await sleep(20)
  }
  return {
    pid: child.pid,
    done,
    stop: async () => {
      child.kill('SIGTERM')
      if (child.exitCode === null) await new Promise((resolve) => child.once('exit', resolve))
    },
  }
}

async function graphileUtils(db) {
  const { makeWorkerUtils, Logger } = await import('graphile-worker')
  return makeWorkerUtils({ connectionString: db, logger: new Logger(() => () => undefined) })
}

async function ctxagentQueue(db) {
  const { JobQueue } = await import(join(ROOT, 'dist', 'fleet', 'queue', 'job-queue.js'))
  const pool = new pg.Pool({ connectionString: db, max: 1 })
  await pool.query('SELECT 1')
  return { queue: new JobQueue(pool), pool }
}

async function firstRequest(llm, tag) {
  for (const until = Date.now() + 60_000; !llm.tasks.has(tag); ) {
    if (Date.now() > until) throw new Error(`${tag} never reached the LLM`)
    await sleep(1)
  }
  return llm.tasks.get(tag).first
}

/**
 * One idle `ctxagent worker` (its warm child) and one idle graphile-worker, side by side; a
 * task at a time, alternating: from the enqueue call (ctxagent's JobQueue.enqueue, the library
 * call `ctxagent enqueue` makes; graphile-worker's addJob), each on a pool already connected,
 * to the task's first request at the LLM.
 */
export async function dispatchVsGraphile(db, llm) {
  await truncateJobs(db)
  const { home, ws, env } = setup('fleet-gw-dispatch', llm, db)
  const worker = await startWorker(env)
  const gw = await startGraphile(db, env, 1)
  const utils = await graphileUtils(db)
  const { queue, pool } = await ctxagentQueue(db)
  const ours = []
  const theirs = []
  try {
    for (let i = 0; i < DISPATCHES; i++) {
      await sleep(IDLE_MS)
      const tag = `gwd-ctx-${i}`
      const t0 = now()
      await queue.enqueue({ task_uuid: crypto.randomUUID(), kind: 'new', spec: { task: `bench:${tag} turns:1`, workspace: ws } })
      ours.push((await firstRequest(llm, tag)) - t0)
      await waitDone(db, i + 1, tag)
      await sleep(IDLE_MS)
      const theirTag = `gwd-gw-${i}`
      const t1 = now()
      await utils.addJob('ctxagent', { task: `bench:${theirTag} turns:1`, workspace: ws, tag: theirTag })
      theirs.push((await firstRequest(llm, theirTag)) - t1)
      while (gw.done.length < i + 1) await sleep(5)
    }
  } finally {
    await pool.end()
    await utils.release()
    await gw.stop()
    await worker.stop()
    remove(home)
  }
  const p = (xs, q) => percentile(xs, q)
  say(`dispatch ctxagent: ${ours.map(Math.round).join(' ')}`)
  say(`dispatch graphile-worker: ${theirs.map(Math.round).join(' ')}`)
  const ratio = median(ours) / median(theirs)
  return {
    name: 'fleet-vs-graphile-dispatch',
    what: `enqueue call → the task's first LLM request, one idle worker each, ${DISPATCHES} tasks each alternating: ctxagent worker (warm child; JobQueue.enqueue, the library call of ctxagent enqueue) vs graphile-worker 0.17.3 (addJob; its task spawns node bin/ctxagent run), same PostgreSQL, both pools connected`,
    measured: `ctxagent p50 ${ms(median(ours))}, p99 ${ms(p(ours, 99))}; graphile-worker p50 ${ms(median(theirs))}, p99 ${ms(p(theirs, 99))}`,
    ratio: `${ratio.toFixed(2)}× graphile-worker (p50); p99 ${(p(ours, 99) / p(theirs, 99)).toFixed(2)}×`,
    target: 'p50 ≤ 1.0× graphile-worker',
    pass: ratio <= 1,
  }
}

/** A job's end in a worker's log: `job <id>: <outcome> (job done)`, and the like. */
const JOB_ENDED = / job \d+: (?!starting|resuming|not run)\w+/

/**
 * `TASKS` one-turn tasks queued at once to one worker running `concurrency` at a time:
 * seconds until all ended (seen in the worker's log, as graphile-worker's side sees its
 * jobs' ends in its output, not by polling the database beside it), and the CPU of the
 * worker and all its children, from the enqueue to its exit.
 */
async function ctxagentBatch(db, llm, concurrency) {
  await truncateJobs(db)
  const { home, ws, env } = setup(`fleet-gw-tp-ctx-${concurrency}`, llm, db)
  const worker = await startWorker(env, ['--concurrency', String(concurrency)])
  const { queue, pool } = await ctxagentQueue(db)
  try {
    await sleep(IDLE_MS)
    const client = await pool.connect()
    const cpu0 = treeCpuMs(worker.pid)
    const t0 = now()
    await client.query('BEGIN')
    for (let i = 0; i < TASKS; i++)
      await queue.enqueue({ task_uuid: crypto.randomUUID(), kind: 'new', spec: { task: `bench:gwt-ctx-${concurrency}-${i} turns:1`, workspace: ws } }, client)
    await client.query('COMMIT')
    client.release()
    for (let ended = 0, seen = 0, until = Date.now() + 30 * 60_000; ended < TASKS; ) {
      if (Date.now() > until) throw new Error(`ctxagent at ${concurrency}: not all ${TASKS} jobs ended:\n${worker.log()}`)
      await sleep(10)
      for (; seen < worker.lines.length; seen++) if (JOB_ENDED.test(worker.lines[seen].line)) ended++
    }
    const seconds = (now() - t0) / 1000
    const cpu = (treeCpuMs(worker.pid) - cpu0) / TASKS
    const end = await waitDone(db, TASKS, `ctxagent at ${concurrency}`)
    if (end.completed !== TASKS) throw new Error(`ctxagent at ${concurrency}: ${end.completed} of ${TASKS} completed:\n${worker.log()}`)
    let running = 0
    let most = 0
    for (const { line } of worker.lines) {
      if (/ job \d+: starting task /.test(line)) most = Math.max(most, ++running)
      else if (/ job \d+: completed/.test(line)) running--
    }
    // From the worker's log: a task's end is logged once its job is settled, after its slot was freed, so this may read one high.
    say(`ctxagent at ${concurrency}: at most ${most} tasks ran at once (from its log)`)
    return { seconds, cpu }
  } finally {
    await pool.end()
    await worker.stop()
    remove(home)
  }
}

async function graphileBatch(db, llm, concurrency) {
  const { home, ws, env } = setup(`fleet-gw-tp-gw-${concurrency}`, llm, db)
  const gw = await startGraphile(db, env, concurrency)
  const utils = await graphileUtils(db)
  try {
    await sleep(IDLE_MS)
    const cpu0 = treeCpuMs(gw.pid)
    const t0 = now()
    for (let i = 0; i < TASKS; i++)
      await utils.addJob('ctxagent', { task: `bench:gwt-gw-${concurrency}-${i} turns:1`, workspace: ws, tag: `gwt-gw-${concurrency}-${i}` })
    for (const until = Date.now() + 30 * 60_000; gw.done.length < TASKS; ) {
      if (Date.now() > until) throw new Error(`graphile-worker at ${concurrency}: ${gw.done.length} of ${TASKS} done`)
      await sleep(10)
    }
    const seconds = (now() - t0) / 1000
    const cpu = (treeCpuMs(gw.pid) - cpu0) / TASKS
    const failed = gw.done.filter((d) => d.code !== '0').length
    if (failed > 0) throw new Error(`graphile-worker at ${concurrency}: ${failed} task(s) failed`)
    say(`graphile-worker at ${concurrency}: at most ${gw.done.at(-1).most} jobs ran at once`)
    return { seconds, cpu }
  } finally {
    await utils.release()
    await gw.stop()
    remove(home)
  }
}

export async function throughputVsGraphile(db, llm) {
  const rows = []
  // CTXAGENT_BENCH_GRAPHILE_CONCURRENCY=16 (or 1,4) runs only those.
  const levels = (process.env.CTXAGENT_BENCH_GRAPHILE_CONCURRENCY ?? '1,4,16').split(',').map(Number)
  for (const concurrency of levels) {
    // Twice each, in ABBA order, so that a drift in the machine's load hits both alike; times and CPU summed.
    const ours = { seconds: 0, cpu: 0 }
    const theirs = { seconds: 0, cpu: 0 }
    for (const side of ['ours', 'theirs', 'theirs', 'ours']) {
      const batch = side === 'ours' ? await ctxagentBatch(db, llm, concurrency) : await graphileBatch(db, llm, concurrency)
      const sum = side === 'ours' ? ours : theirs
      sum.seconds += batch.seconds / 2
      sum.cpu += batch.cpu / 2
    }
    const perMin = (s) => Math.round((TASKS / s) * 60)
    say(
      `${TASKS} tasks at ${concurrency}: ctxagent ${ours.seconds.toFixed(1)} s, ${ms(ours.cpu)} CPU a task; graphile-worker ${theirs.seconds.toFixed(1)} s, ${ms(theirs.cpu)} CPU a task`,
    )
    rows.push({ concurrency, ours: perMin(ours.seconds), theirs: perMin(theirs.seconds), ratio: theirs.seconds / ours.seconds, cpu: [ours.cpu, theirs.cpu] })
  }
  const load = readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ')
  return {
    name: 'fleet-vs-graphile-throughput',
    what: `${TASKS} one-turn tasks (finish at once) queued at once (twice each side, ABBA), against a zero-latency local server: one ctxagent worker --concurrency 1/4/16 vs graphile-worker 0.17.3 at the same concurrency, its task spawning node bin/ctxagent run per job; same PostgreSQL (index in both); 2 cores`,
    measured: `${rows.map((r) => `at ${r.concurrency}: ${r.ours} vs ${r.theirs} tasks/min (CPU a task from the enqueue to the last end, the worker's process and its children: ${ms(r.cpu[0])} vs ${ms(r.cpu[1])})`).join('; ')}; load average after ${load}`,
    ratio: rows.map((r) => `${r.ratio.toFixed(2)}× at ${r.concurrency}`).join(', '),
    target: '≥ 1.0× graphile-worker at each',
    pass: rows.every((r) => r.ratio >= 1),
  }
}

function psqlBinary() {
  const versions = existsSync('/usr/lib/postgresql') ? readdirSync('/usr/lib/postgresql').sort((a, b) => b - a) : []
  for (const v of versions) if (existsSync(`/usr/lib/postgresql/${v}/bin/psql`)) return `/usr/lib/postgresql/${v}/bin/psql`
  return 'psql'
}

async function timed(fn) {
  const t0 = now()
  await fn()
  return now() - t0
}

/** `ctxagent enqueue` (whole command) vs `psql -c 'select 1'`, with node's start-up and `ctxagent --version` beside, alternating. */
export async function enqueueVsPsql(db, llm) {
  await truncateJobs(db)
  const { home, ws, env } = setup('fleet-enqueue-cli', llm, db)
  const psql = psqlBinary()
  const t = { enqueue: [], psql: [], node: [], version: [] }
  try {
    for (let i = 0; i < ENQUEUES; i++) {
      t.psql.push(await timed(async () => execFileSync(psql, [db, '-qAtc', 'select 1'], { stdio: 'ignore' })))
      t.node.push(await timed(async () => execFileSync(process.execPath, ['-e', '0'], { stdio: 'ignore' })))
      t.version.push(await timed(() => cli(['--version'], env)))
      t.enqueue.push(
        await timed(async () => {
          const res = await cli(['enqueue', '--task', `bench:enqueue-${i} turns:1`, '--workspace', ws], env)
          if (res.code !== 0) throw new Error(`enqueue failed: ${res.err}`)
        }),
      )
    }
  } finally {
    remove(home)
  }
  const m = Object.fromEntries(Object.entries(t).map(([k, v]) => [k, median(v)]))
  say(`enqueue: ${t.enqueue.map(Math.round).join(' ')}; psql: ${t.psql.map(Math.round).join(' ')}`)
  return {
    name: 'fleet-enqueue-cli',
    what: `wall time of the ctxagent enqueue command (${ENQUEUES} runs; node start-up, the bundle, config, connect, schema check, insert) vs psql -c 'select 1' on the same server, alternating; beside it node -e 0 and ctxagent --version`,
    measured: `enqueue ${ms(m.enqueue)} (node ${ms(m.node)}, --version ${ms(m.version)}: the database part ${ms(m.enqueue - m.version)}); psql ${ms(m.psql)}`,
    ratio: `${(m.enqueue / m.psql).toFixed(1)}× psql; ${(m.enqueue / m.version).toFixed(2)}× --version`,
    target: "database part (enqueue less --version) ≤ 50 ms: this bench's aim, psql the floor",
    pass: m.enqueue - m.version <= 50,
  }
}
