// What one enqueue costs the server with many idle workers (issue 29): before, a job's NOTIFY
// woke every idle worker and each claimed (all but one finding nothing); now it wakes one.
// Idle workers are emulated, 50, 100 and 300 of them, in this one process (300 `ctxagent
// worker` processes would not fit on 2 cores): each registered (registerWorker), LISTENing
// through the worker's own JobListener on its connection, and claiming through JobQueue.claim
// on every wake-up, as Worker does. "Before" is the same code with no idle rows (claim without
// its channel): the trigger then NOTIFYs the channel all workers hear, as it always did.
// The server's CPU is the utime + stime of the postmaster's children (/proc), over a run of
// enqueues each waited out (its job claimed and finished, every claim it caused answered).
// Beside it, PostgreSQL's own floor: a NOTIFY no one hears, the same connections listening.
import { readdirSync, readFileSync } from 'node:fs'
import { execFileSync } from 'node:child_process'
import { join } from 'node:path'
import pg from 'pg'
import { ROOT } from './lib.mjs'
import { sleep } from './fleet-lib.mjs'

const SIZES = (process.env.CTXAGENT_BENCH_FLEET_HERD ?? '50,100,300').split(',').map(Number)
const ENQUEUES = Number(process.env.CTXAGENT_BENCH_FLEET_HERD_ENQUEUES ?? 30)
const say = (line) => process.stderr.write(`  fleet: ${line}\n`)

/** CPU milliseconds used so far by the server's processes (the postmaster's children). */
function serverCpuMs(postmaster) {
  const tick = 1000 / Number(execFileSync('getconf', ['CLK_TCK']).toString().trim())
  let total = 0
  for (const pid of readdirSync('/proc').filter((p) => /^\d+$/.test(p))) {
    let stat
    try {
      stat = readFileSync(`/proc/${pid}/stat`, 'utf8')
    } catch {
      continue
    }
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
    if (Number(fields[1]) !== postmaster && Number(pid) !== postmaster) continue
    total += (Number(fields[11]) + Number(fields[12])) * tick
  }
  return total
}

async function measure(db, postmaster, n, one) {
  const { JobQueue } = await import(join(ROOT, 'dist', 'fleet', 'queue', 'job-queue.js'))
  const { JobListener } = await import(join(ROOT, 'dist', 'fleet', 'queue', 'listener.js'))
  const { registerWorker } = await import(join(ROOT, 'dist', 'fleet', 'worker', 'registry.js'))
  const pool = new pg.Pool({ connectionString: db, max: 20 })
  await pool.query('TRUNCATE fleet_jobs, fleet_workers, fleet_idle')
  const queue = new JobQueue(pool)
  const stats = { claims: 0, empty: 0, inflight: 0, last: performance.now() }
  const listeners = []
  try {
    for (let i = 0; i < n; i++) {
      const record = await registerWorker(pool, 'bench-herd', 1, 600)
      const idle = { channel: `ctxagent_w_${crypto.randomUUID().replaceAll('-', '')}`, staleSeconds: 600 }
      const claim = async () => {
        stats.inflight++
        stats.last = performance.now()
        try {
          const job = await queue.claim(record.id, null, one ? idle : null)
          stats.claims++
          if (job === null) stats.empty++
          // Its task takes no time: the job ends at once, and the worker looks again (as Worker does after a task).
          else {
            await queue.finish(job, record.id, { outcome: 'completed' })
            await claim()
          }
        } finally {
          stats.inflight--
          stats.last = performance.now()
        }
      }
      const listener = new JobListener(db, idle.channel, () => void claim())
      listeners.push(listener)
      await listener.start()
    }
    const settled = async () => {
      while (stats.inflight > 0 || performance.now() - stats.last < 100) await sleep(20)
    }
    await settled()
    const idleRows = Number((await pool.query('SELECT count(*) AS n FROM fleet_idle')).rows[0].n)
    const before = { cpu: serverCpuMs(postmaster), claims: stats.claims, empty: stats.empty }
    for (let i = 0; i < ENQUEUES; i++) {
      await queue.enqueue({ task_uuid: crypto.randomUUID(), kind: 'new', spec: { task: 'herd' } })
      while ((await pool.query(`SELECT count(*) AS n FROM fleet_jobs WHERE state = 'done'`)).rows[0].n < i + 1) await sleep(5)
      await settled()
    }
    const cpu = serverCpuMs(postmaster) - before.cpu
    return {
      floorPerNotify: one ? await signallingFloor(pool, postmaster) : null,
      cpuPerEnqueue: cpu / ENQUEUES,
      claimsPerEnqueue: (stats.claims - before.claims) / ENQUEUES,
      emptyPerEnqueue: (stats.empty - before.empty) / ENQUEUES,
      idleRows,
    }
  } finally {
    await Promise.all(listeners.map((l) => l.stop()))
    await pool.end()
  }
}

/**
 * PostgreSQL's own part of a wake-up: the server's CPU per NOTIFY on a channel no connection
 * listens on, the same idle workers listening. PostgreSQL 15 signals every backend that
 * listens in the database, whatever its channels (async.c, SignalBackends), and each reads the
 * queue to find nothing for it: what a NOTIFY costs with n listeners before any worker claims.
 */
async function signallingFloor(pool, postmaster) {
  const spent = async (notify) => {
    const before = serverCpuMs(postmaster)
    for (let i = 0; i < ENQUEUES; i++) {
      // The same statement each time: a query and a NOTIFY, or a query alone (the server's own background work meanwhile).
      await pool.query(notify ? 'NOTIFY ctxagent_bench_nobody' : 'SELECT 1')
      // Each one waited out as an enqueue is: the signalled backends have read the queue.
      await sleep(100)
    }
    return serverCpuMs(postmaster) - before
  }
  const quiet = await spent(false)
  return Math.max(0, (await spent(true)) - quiet) / ENQUEUES
}

export async function herdRow(server) {
  if (server.pid === null) throw new Error('the herd bench samples the server it started: unset CTXAGENT_BENCH_DATABASE_URL')
  const rows = []
  for (const n of SIZES) {
    const all = await measure(server.url, server.pid, n, false)
    const one = await measure(server.url, server.pid, n, true)
    say(
      `${n} idle: before ${all.cpuPerEnqueue.toFixed(1)} ms CPU, ${all.claimsPerEnqueue.toFixed(1)} claims (${all.emptyPerEnqueue.toFixed(1)} empty); after ${one.cpuPerEnqueue.toFixed(1)} ms, ${one.claimsPerEnqueue.toFixed(1)} claims (${one.emptyPerEnqueue.toFixed(1)} empty), ${one.idleRows} idle rows; a NOTIFY no one hears ${one.floorPerNotify.toFixed(1)} ms`,
    )
    rows.push({ n, all, one })
  }
  const biggest = rows[rows.length - 1]
  return {
    name: 'fleet-wake-one',
    what: `the server's CPU (utime + stime of all its processes, /proc) and the claims per enqueue with ${SIZES.join('/')} idle workers (emulated in one process through the worker's JobListener and JobQueue.claim, one LISTEN connection each), ${ENQUEUES} enqueues each waited out: one idle worker woken (its own channel) vs every idle worker (the channel all hear, as before); beside it, a NOTIFY on a channel no one listens on with the same workers listening (PostgreSQL 15 signals every listener of the database)`,
    measured: rows
      .map(
        (r) =>
          `${r.n} idle: ${r.one.cpuPerEnqueue.toFixed(1)} ms, ${r.one.claimsPerEnqueue.toFixed(1)} claims vs ${r.all.cpuPerEnqueue.toFixed(1)} ms, ${r.all.claimsPerEnqueue.toFixed(1)} claims (a NOTIFY no one hears, the same ${r.n} listening: ${r.one.floorPerNotify.toFixed(1)} ms)`,
      )
      .join('; '),
    ratio: `${rows.map((r) => `${(r.one.cpuPerEnqueue / r.all.cpuPerEnqueue).toFixed(2)}× at ${r.n}`).join(', ')} the CPU of waking all; PostgreSQL's signalling of the listeners alone is ${rows
      .map((r) => `${(r.one.floorPerNotify / r.all.cpuPerEnqueue).toFixed(2)}×`)
      .join(', ')} of it`,
    target: `at most 2 claims an enqueue, and CPU at ${biggest.n} idle ≤ 0.2× waking all`,
    pass: rows.every((r) => r.one.claimsPerEnqueue <= 2) && biggest.one.cpuPerEnqueue <= 0.2 * biggest.all.cpuPerEnqueue,
  }
}
