// What a NOTIFY costs per LISTEN connection (issue 34, docs/fleet-operations.md#at-1000-hosts):
// the enqueue's commit time, the server's CPU per enqueue and the delivery time with 100, 300
// and 1,000 connections LISTENing as a worker's JobListener does (`ctxagent_jobs` and a channel
// of its own), against 1 listener, in the same run on the same server.
//
// An enqueue is the real one: JobQueue.enqueue (the library call of `ctxagent enqueue`) on a
// connected pool, its INSERT committed alone, its trigger's NOTIFY sent at that commit. Two
// cases: **one** idle worker (a fleet_idle row names one listener's channel, put there before
// each enqueue, untimed: the enqueue NOTIFYs that channel alone, as when a worker is idle) and
// **all** (no idle row: the enqueue NOTIFYs `ctxagent_jobs`, which every listener hears, as when
// every worker is busy). PostgreSQL signals every listening backend of the database either
// way; each wakes, reads the queue and drops what it does not listen to.
//
// All the connections (the largest size) stay open the whole run; a size is set by which of
// them LISTEN (the others have run UNLISTEN *: open, idle, not listeners), so that the sizes
// can alternate within one run: ROUNDS rounds, each timing every size in turn (the order
// reversed every other round), so that a drift in the machine's load hits all alike. Server
// CPU: the time on a CPU of the postmaster's children (/proc/<pid>/schedstat, ns) over each
// batch, the listeners' wake-ups included. Starts its own server (max_connections 1,200,
// shared_buffers 16 MB), like bench/fleet-lib.mjs; stops it and closes every connection at the
// end, on an error too.
//
// Sizes (environment): CTXAGENT_BENCH_NOTIFY_SIZES (100,300,1000; 1 listener, the baseline, is
// always measured too), CTXAGENT_BENCH_NOTIFY_ENQUEUES (60: per size, case and round),
// CTXAGENT_BENCH_NOTIFY_ROUNDS (3). Run alone: `node bench/notify-listeners.mjs` (prints the
// rows; needs `npm run build`), or `npm run bench -- notify-listeners` (writes BENCHMARKS.md).
import { randomUUID } from 'node:crypto'
import { readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'
import pg from 'pg'
import { median, remove, ROOT, scratch } from './lib.mjs'
import { cli, percentile, startPostgres } from './fleet-lib.mjs'

const SIZES = [1, ...(process.env.CTXAGENT_BENCH_NOTIFY_SIZES ?? '100,300,1000').split(',').map(Number)]
const ENQUEUES = Number(process.env.CTXAGENT_BENCH_NOTIFY_ENQUEUES ?? 60)
const ROUNDS = Number(process.env.CTXAGENT_BENCH_NOTIFY_ROUNDS ?? 3)
const CASES = ['one', 'all']
const BATCH = 25
const DELIVERY_TIMEOUT_MS = 10_000
const say = (line) => process.stderr.write(`  notify: ${line}\n`)
const own = (i) => `ctxagent_w_bench_${i}`

/** The soft limit on open files of this process (its sockets to the server count). */
function openFilesLimit() {
  const line = readFileSync('/proc/self/limits', 'utf8')
    .split('\n')
    .find((l) => l.startsWith('Max open files'))
  const soft = line?.split(/\s{2,}/)[1]
  return soft === undefined || soft === 'unlimited' ? Number.POSITIVE_INFINITY : Number(soft)
}

/** Nanoseconds on a CPU so far of each of the postmaster's children (schedstat's first field), by pid. */
function serverCpuNs(postmaster) {
  const byPid = new Map()
  for (const pid of readdirSync('/proc').filter((p) => /^\d+$/.test(p))) {
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8')
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1])
      if (ppid !== postmaster && Number(pid) !== postmaster) continue
      byPid.set(pid, Number(readFileSync(`/proc/${pid}/schedstat`, 'utf8').split(' ')[0]))
    } catch {
      // gone meanwhile
    }
  }
  return byPid
}

/** CPU ms the server's processes used between two serverCpuNs readings (a process gone since is left out). */
function cpuMsBetween(before, after) {
  let ns = 0
  for (const [pid, total] of after) ns += total - (before.get(pid) ?? 0)
  return ns / 1e6
}

/** In chunks of BATCH at a time: 1,000 connections at once would only queue at the postmaster. */
async function inBatches(items, fn) {
  for (let i = 0; i < items.length; i += BATCH) await Promise.all(items.slice(i, i + BATCH).map(fn))
}

/** `count` connections; each counts the notifications it gets for the pending enqueue. */
async function openListeners(url, count, pending) {
  const listeners = Array.from({ length: count }, (_, i) => ({
    i,
    listening: false,
    errors: [],
    client: new pg.Client({ connectionString: url, application_name: `ctxagent worker-listen bench:${i}` }),
  }))
  for (const l of listeners) {
    l.client.on('error', (e) => l.errors.push(e.message))
    l.client.on('notification', (n) => pending.current?.got(n.channel))
  }
  try {
    await inBatches(listeners, (l) => l.client.connect())
  } catch (e) {
    await closeAll(listeners)
    throw e
  }
  return listeners
}

async function closeAll(listeners) {
  await inBatches(listeners, (l) => l.client.end().catch(() => undefined))
}

/** The first `n` LISTEN as a worker's JobListener does; the others not at all. */
async function setListening(listeners, n, channel) {
  await inBatches(listeners, async (l) => {
    const want = l.i < n
    if (want === l.listening) return
    await l.client.query(want ? `LISTEN ${channel}; LISTEN ${own(l.i)}` : 'UNLISTEN *')
    l.listening = want
  })
}

/**
 * `count` enqueues, each waited out until its notification arrived (at the one listener woken,
 * or at all `n`): per enqueue, its commit (the enqueue call) and its delivery (the call's start
 * to the last listener's receipt), in ms; and the server's CPU over the batch.
 */
async function batch({ pool, queue, worker, postmaster, pending, n, mode, count, channel }) {
  const commits = []
  const deliveries = []
  let missed = 0
  const cpuBefore = serverCpuNs(postmaster)
  for (let k = 0; k < count; k++) {
    const target = mode === 'one' ? own(k % n) : channel
    if (mode === 'one') await pool.query('INSERT INTO fleet_idle (channel, worker_id, stale_seconds) VALUES ($1, $2, 86400)', [target, worker.id])
    const want = mode === 'one' ? 1 : n
    let got = 0
    let arrived
    // A notification that never comes is counted (the row fails), not waited for forever.
    const delivered = new Promise((resolve) => {
      const timer = setTimeout(() => resolve(null), DELIVERY_TIMEOUT_MS)
      arrived = () => {
        clearTimeout(timer)
        resolve(performance.now())
      }
    })
    pending.current = { got: (c) => c === target && ++got === want && arrived() }
    const start = performance.now()
    const id = await queue.enqueue({ task_uuid: randomUUID(), kind: 'new', spec: { task: 'notify bench' } })
    commits.push(performance.now() - start)
    if (id === null) throw new Error('an enqueue was refused')
    const at = await delivered
    pending.current = null
    if (at === null) missed += want - got
    else deliveries.push(at - start)
  }
  return { commits, deliveries, missed, cpuMs: cpuMsBetween(cpuBefore, serverCpuNs(postmaster)) / count }
}

export async function run() {
  const most = Math.max(...SIZES)
  // Node cannot raise its own limit: the shell that starts the bench can (a hard limit of 1,024 needs root or limits.conf).
  if (openFilesLimit() < most + 100)
    return CASES.map((mode) => ({
      name: mode === 'one' ? 'notify-listeners' : 'notify-listeners-all',
      what: `JobQueue.enqueue with ${SIZES.slice(1).join('/')} LISTEN connections vs 1`,
      measured: `not run: ${most} connections need more open files than this process may have (${openFilesLimit()}); run it after ulimit -n ${most + 200}`,
      ratio: '-',
      target: 'every notification delivered',
      pass: false,
    }))
  const server = await startPostgres({ max_connections: Math.max(most + 200, 1200), shared_buffers: '16MB' })
  if (server.pid === null) {
    await server.stop()
    throw new Error('the NOTIFY bench reads the CPU of the server it starts: unset CTXAGENT_BENCH_DATABASE_URL')
  }
  // Stopped on a signal too: the server runs in a process group of its own.
  const onSignal = () => {
    process.kill(server.pid, 'SIGQUIT')
    process.exit(130)
  }
  process.once('SIGINT', onSignal)
  process.once('SIGTERM', onSignal)
  const home = scratch('notify')
  const pending = { current: null }
  let listeners = []
  let pool = null
  try {
    // The tables are made by the first command that needs them.
    const probe = await cli(['fleet', '--json'], { CTXAGENT_DATABASE_URL: server.url, CTXAGENT_HOME: home })
    if (probe.code !== 0) throw new Error(`ctxagent fleet failed against the bench database: ${probe.err}`)
    const { JobQueue } = await import(join(ROOT, 'dist', 'fleet', 'queue', 'job-queue.js'))
    const { ALL_WORKERS_CHANNEL } = await import(join(ROOT, 'dist', 'fleet', 'queue', 'listener.js'))
    const { registerWorker } = await import(join(ROOT, 'dist', 'fleet', 'worker', 'registry.js'))
    pool = new pg.Pool({ connectionString: server.url, max: 1 })
    const queue = new JobQueue(pool)
    const worker = await registerWorker(pool, 'bench-notify', 1, 86400)
    const opened = performance.now()
    listeners = await openListeners(server.url, most, pending)
    say(`${most} connections open in ${((performance.now() - opened) / 1000).toFixed(1)} s`)
    const samples = new Map(SIZES.flatMap((n) => CASES.map((mode) => [`${n}/${mode}`, { commits: [], deliveries: [], cpu: [], missed: 0 }])))
    for (let round = 0; round < ROUNDS; round++) {
      const order = round % 2 ? [...SIZES].reverse() : SIZES
      for (const n of order) {
        await setListening(listeners, n, ALL_WORKERS_CHANNEL)
        for (const mode of round % 2 ? [...CASES].reverse() : CASES) {
          const b = await batch({ pool, queue, worker, postmaster: server.pid, pending, n, mode, count: ENQUEUES, channel: ALL_WORKERS_CHANNEL })
          const s = samples.get(`${n}/${mode}`)
          s.commits.push(...b.commits)
          s.deliveries.push(...b.deliveries)
          s.cpu.push(b.cpuMs)
          s.missed += b.missed
          say(
            `round ${round + 1}, ${n} listening, ${mode}: commit ${ms(median(b.commits))}, delivery ${b.deliveries.length ? ms(median(b.deliveries)) : 'none'}, server CPU ${ms(b.cpuMs)} an enqueue${b.missed ? `, ${b.missed} notifications missed` : ''}`,
          )
        }
      }
    }
    const errors = listeners.flatMap((l) => l.errors)
    if (errors.length > 0) throw new Error(`listener connections failed: ${errors[0]}`)
    return CASES.map((mode) => row(mode, samples))
  } finally {
    pending.current = null
    await closeAll(listeners)
    await pool?.end().catch(() => undefined)
    await server.stop()
    process.removeListener('SIGINT', onSignal)
    process.removeListener('SIGTERM', onSignal)
    remove(home)
  }
}

const ms = (v) => `${v.toFixed(2)} ms`
const us = (v) => `${v < 0 ? '−' : '+'}${Math.abs(Math.round(v * 1000))} µs`

/** Per size: medians over every enqueue of every round (commit, delivery), of the batches (CPU). */
function row(mode, samples) {
  const at = (n) => {
    const s = samples.get(`${n}/${mode}`)
    return { commit: median(s.commits), p95: percentile(s.commits, 95), delivery: median(s.deliveries), cpu: median(s.cpu), missed: s.missed }
  }
  const base = at(1)
  const sizes = SIZES.slice(1)
  const perListener = (n, key) => (at(n)[key] - base[key]) / (n - 1)
  const biggest = sizes[sizes.length - 1]
  return {
    name: mode === 'one' ? 'notify-listeners' : 'notify-listeners-all',
    what: `JobQueue.enqueue (its INSERT committed alone; its trigger NOTIFYs at the commit) with ${sizes.join('/')} connections LISTENing as a worker does (ctxagent_jobs and one of their own) vs 1, ${ROUNDS} rounds × ${ENQUEUES} enqueues each, sizes alternating, all ${Math.max(...SIZES)} connections open throughout (the others not listening), one server on this machine; ${
      mode === 'one'
        ? 'one idle worker: the NOTIFY goes to one listener’s own channel (every listener is still signalled)'
        : 'no idle worker: the NOTIFY goes to ctxagent_jobs, which every listener receives (in this process)'
    }; medians: the enqueue call, the server’s CPU (its processes’ schedstat over each batch; with one idle worker, the untimed INSERT of its fleet_idle row included) and the time to ${mode === 'one' ? 'the woken listener' : 'the last listener'}`,
    measured: [1, ...sizes]
      .map((n) => {
        const a = at(n)
        return `${n.toLocaleString('en-US')}: commit ${ms(a.commit)} (p95 ${ms(a.p95)}), server CPU ${ms(a.cpu)}, delivered ${ms(a.delivery)}${a.missed ? ` (${a.missed} missed)` : ''}`
      })
      .join('; '),
    ratio:
      sizes.map((n) => `commit ${(at(n).commit / base.commit).toFixed(1)}× at ${n.toLocaleString('en-US')}`).join(', ') +
      ` the 1-listener baseline; per listener: commit ${us(perListener(biggest, 'commit'))}, server CPU ${us(perListener(biggest, 'cpu'))} (at ${biggest.toLocaleString('en-US')})`,
    target: 'every notification delivered (the figures are for docs/fleet-operations.md#at-1000-hosts)',
    pass: SIZES.every((n) => at(n).missed === 0),
  }
}

if (import.meta.url === pathToFileURL(process.argv[1]).href) {
  for (const r of await run()) process.stdout.write(`${JSON.stringify(r, null, 2)}\n`)
}
