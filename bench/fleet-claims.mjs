// The claim's rate as claimers grow (issue 43): 2,000 waiting jobs claimed and finished by 8, 32
// and 64 concurrent claimers (each its own connection, calling JobQueue.claim then finish as a
// worker does: its own idle channel, a completed end), with no money cap and with one (the
// claim then reads user_spend), against the claim of commit c884e40 (bench/fleet-claim-c884e40.mjs:
// its tables, claim and finish as they were, in a schema of their own on the same server).
// Rounds alternate the three ways' order, so that a drift in the machine's load hits all alike.
// Rounds: CTXAGENT_BENCH_CLAIM_ROUNDS (2). Claimers: CTXAGENT_BENCH_CLAIMERS (8,32,64).
import { join } from 'node:path'
import pg from 'pg'
import { median, ROOT } from './lib.mjs'
import { baselineQueue, createSchema, POOL_OPTIONS, SCHEMA } from './fleet-claim-c884e40.mjs'
import { percentile, treeCpuMs } from './fleet-lib.mjs'

const JOBS = 2000
const USERS = 40
const ROUNDS = Number(process.env.CTXAGENT_BENCH_CLAIM_ROUNDS ?? 2)
const CLAIMERS = (process.env.CTXAGENT_BENCH_CLAIMERS ?? '8,32,64').split(',').map(Number)
const WAYS = ['baseline', 'today', 'capped']

/** A money cap no job's user reaches (every claim reads the spend, none is held back), as claimBudget() hands it to the claim. */
function budget() {
  const day = new Date().toISOString().slice(0, 10)
  const month = day.slice(0, 8)
  const caps = { daily: 1_000_000, monthly: 10_000_000, fleet: 100_000_000 }
  return {
    day,
    from: `${month}01`,
    to: `${month}31`,
    daily_until: new Date(Date.now() + 86_400_000).toISOString(),
    monthly_until: new Date(Date.now() + 31 * 86_400_000).toISOString(),
    all: caps,
    users: {},
    os_user: 'bench',
  }
}

/** The jobs (of USERS users, the spend of each for every day of the month so far), in the schema `schema`. */
async function fill(db, schema) {
  const admin = new pg.Client({ connectionString: db })
  await admin.connect()
  try {
    await admin.query(`SET search_path TO ${schema}`)
    await admin.query('TRUNCATE fleet_jobs, fleet_workers, fleet_idle')
    await admin.query(
      `INSERT INTO fleet_workers (id, hostname, host_id, pid, concurrency) SELECT 'bench:' || i, 'bench-host', 'bench-host', 1, 1 FROM generate_series(0, 63) i`,
    )
    await admin.query(
      `INSERT INTO fleet_jobs (task_uuid, kind, spec, "user") SELECT gen_random_uuid()::text, 'new', '{}', 'user' || (i % ${USERS}) FROM generate_series(1, $1) i`,
      [JOBS],
    )
    if (schema === 'public') {
      const day = new Date().toISOString().slice(0, 10)
      await admin.query(
        `INSERT INTO user_spend ("user", day, usd, requests)
         SELECT 'user' || u, to_char(d, 'YYYY-MM-DD'), 1.5, 10 FROM generate_series(0, ${USERS - 1}) u,
                generate_series(date_trunc('month', $1::date), $1::date, interval '1 day') d
         ON CONFLICT DO NOTHING`,
        [day],
      )
    }
    await admin.query('ANALYZE fleet_jobs')
  } finally {
    await admin.end()
  }
}

/** One run: `n` claimers until the queue is empty. Claims a second, p99 claim latency, the server's CPU per claim. */
async function claimRun(db, serverPid, way, n, JobQueue) {
  await fill(db, way === 'baseline' ? SCHEMA : 'public')
  const pools = Array.from({ length: n }, () => new pg.Pool({ connectionString: db, max: 1, ...(way === 'baseline' ? { options: POOL_OPTIONS } : {}) }))
  await Promise.all(pools.map((p) => p.query('SELECT 1')))
  const money = way === 'capped' ? budget() : null
  const ids = new Set()
  const latencies = []
  const cpu = serverPid === null ? null : treeCpuMs(serverPid)
  const started = performance.now()
  await Promise.all(
    pools.map(async (pool, i) => {
      const worker = `bench:${i}`
      const idle = { channel: `bench_idle_${i}`, staleSeconds: 30 }
      const queue = way === 'baseline' ? baselineQueue(pool) : new JobQueue(pool)
      for (;;) {
        const at = performance.now()
        const job = way === 'baseline' ? await queue.claim(worker, null, idle) : await queue.claim(worker, null, idle, money)
        latencies.push(performance.now() - at)
        if (job === null) return
        if (ids.has(job.id)) throw new Error(`job ${job.id} claimed twice`)
        ids.add(job.id)
        await queue.finish(job, worker, { outcome: 'completed' })
      }
    }),
  )
  const seconds = (performance.now() - started) / 1000
  const serverMs = cpu === null ? null : treeCpuMs(serverPid) - cpu
  await Promise.all(pools.map((p) => p.end()))
  if (ids.size !== JOBS) throw new Error(`${way} at ${n}: ${ids.size} of ${JOBS} jobs claimed`)
  return { perSecond: JOBS / seconds, p99: percentile(latencies, 99), cpuPerClaim: serverMs === null ? null : serverMs / JOBS }
}

/** Exactness after the capped runs: each claim counted once, each wait observed once (the readers' totals). */
async function countsOf(db) {
  const { fleetCounterTotals } = await import(join(ROOT, 'dist', 'storage', 'index', 'fleet-counters.js'))
  const { queueWaitTotals } = await import(join(ROOT, 'dist', 'storage', 'index', 'queue-waits.js'))
  const pool = new pg.Pool({ connectionString: db, max: 1 })
  try {
    const counters = await fleetCounterTotals(pool)
    const waits = await queueWaitTotals(pool)
    return { claims: Object.values(counters?.claims ?? {}).reduce((a, b) => a + b, 0), observed: waits.reduce((a, r) => a + r.n, 0) }
  } finally {
    await pool.end()
  }
}

export async function claimScaleRows(server, say) {
  const { JobQueue } = await import(join(ROOT, 'dist', 'fleet', 'queue', 'job-queue.js'))
  const admin = new pg.Client({ connectionString: server.url })
  await admin.connect()
  await createSchema(admin)
  await admin.end()
  const before = await countsOf(server.url)
  const results = Object.fromEntries(CLAIMERS.map((n) => [n, Object.fromEntries(WAYS.map((w) => [w, []]))]))
  for (let round = 0; round < ROUNDS; round++) {
    for (const n of CLAIMERS) {
      for (const way of round % 2 ? [...WAYS].reverse() : WAYS) {
        const r = await claimRun(server.url, server.pid, way, n, JobQueue)
        results[n][way].push(r)
        say(
          `claim ${way} × ${n}: ${Math.round(r.perSecond)}/s, p99 ${r.p99.toFixed(0)} ms${r.cpuPerClaim === null ? '' : `, server ${r.cpuPerClaim.toFixed(2)} ms CPU a claim`}`,
        )
      }
    }
  }
  const after = await countsOf(server.url)
  // Two ways of today's claim ran ROUNDS times at each size: each claim counted and observed once.
  const expected = 2 * ROUNDS * CLAIMERS.length * JOBS
  const exact = after.claims - before.claims === expected && after.observed - before.observed === expected
  const of = (n, way, k) => median(results[n][way].map((r) => r[k]))
  const line = (way) =>
    CLAIMERS.map(
      (n) =>
        `${n}: ${Math.round(of(n, way, 'perSecond'))}/s, p99 ${of(n, way, 'p99').toFixed(0)} ms${server.pid === null ? '' : `, ${of(n, way, 'cpuPerClaim').toFixed(2)} ms server CPU a claim`}`,
    ).join('; ')
  const ratios = (way) => CLAIMERS.map((n) => of(n, way, 'perSecond') / of(n, 'baseline', 'perSecond'))
  const what = (cap) =>
    `claim + finish of ${JOBS.toLocaleString('en-US')} waiting jobs (${USERS} users) by ${CLAIMERS.join(' / ')} concurrent claimers (one connection each, JobQueue.claim with an idle channel as a worker calls it)${cap ? ', a money cap configured (the claim reads user_spend; no user near it)' : ''}, vs c884e40's claim and finish (its tables in a schema of their own, same server), ${ROUNDS} rounds alternating; medians; shared 2-core machine under load`
  return [
    {
      name: 'fleet-claim-scale',
      what: what(false),
      measured: `today ${line('today')}; c884e40 ${line('baseline')}; counters and histogram exact: ${exact ? 'yes' : `no (claims +${after.claims - before.claims}, observed +${after.observed - before.observed}, expected +${expected})`}`,
      ratio: ratios('today')
        .map((r, i) => `${r.toFixed(2)}× at ${CLAIMERS[i]}`)
        .join(', '),
      target: '≥ 1.0× c884e40 at each, counters exact',
      pass: exact && ratios('today').every((r) => r >= 1),
    },
    {
      name: 'fleet-claim-scale-cap',
      what: what(true),
      measured: `capped ${line('capped')}; c884e40 (no caps then) ${line('baseline')}`,
      ratio: ratios('capped')
        .map((r, i) => `${r.toFixed(2)}× at ${CLAIMERS[i]}`)
        .join(', '),
      target: '≥ 0.8× c884e40 at each',
      pass: exact && ratios('capped').every((r) => r >= 0.8),
    },
  ]
}
