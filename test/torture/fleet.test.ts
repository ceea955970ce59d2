import { existsSync, readdirSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { chaosWorker, holders, warmChildren } from '../helpers/fleet-chaos.js'
import type { ChaosWorker } from '../helpers/fleet-chaos.js'
import { canUnshare, FAST_LOCKS, finish, until } from '../helpers/fleet-hosts.js'
import { usePostgres } from '../helpers/use-postgres.js'
import { fleetJobs } from '../helpers/fleet-jobs.js'
import { agentRequests, readTask, runSetup } from '../run/harness.js'
import type { RunSetup } from '../run/harness.js'
import { litter, strayLocks, taskPlaces, unreadable } from './checks.js'
import { record } from './report.js'

/**
 * Issue #29's chaos soak: TASKS tasks enqueued to a fleet while, at points counted in the
 * agents' requests (never in time), an agent is SIGKILLed, a worker is SIGKILLed and
 * another started, a warm child is SIGKILLed, a worker is SIGSTOPped past the time its
 * row counts as live and SIGCONTed, PostgreSQL is killed and started again, and the LLM
 * answers 503 for a few requests; watch-locks passes run meanwhile. Then: 0 lost, 0 run
 * twice, 0 stuck. Full size (`npm run torture -- fleet`): 300 tasks, 4 workers on 3
 * simulated hosts.
 */
const TASKS = Number(process.env.CTXAGENT_TORTURE_FLEET_TASKS ?? 12)
const FULL = TASKS >= 100
/** Agent turns of each task before it finishes. */
const TURNS = 3
/** Agent requests between two chaos events: about a dozen events in a soak. */
const STEP = Math.max(4, Math.floor((TASKS * TURNS) / 12))
/**
 * At full size (or with CTXAGENT_TORTURE_FLEET_HOSTS=1) 4 workers: 3 on simulated hosts (one each: a PID namespace is a
 * host, so two workers in two would be two hosts of one name) and one on this host; 2 on this host otherwise.
 */
const HOSTS = (FULL || process.env.CTXAGENT_TORTURE_FLEET_HOSTS === '1') && canUnshare ? ['fleet-a', 'fleet-b', 'fleet-c', null] : [null, null]
const CONCURRENCY = FULL ? 4 : 3
const CHAOS = ['agent', 'worker', 'warm', 'freeze', 'postgres', 'llm'] as const

const database = usePostgres()
const query = database.query
const db = database.env

const jobs = () => fleetJobs(database)
const OPEN = ['waiting', 'running', 'retrying']

/**
 * A model whose tasks take TURNS turns each (more, slower ones until `cycled()` says every
 * kind of chaos was injected once: the first tasks are still under way for each), that notes a request for a task that arrives
 * while another for the same task waits for its answer (two owners), each final answer it
 * gave, and answers 503 while `outage` counts down.
 */
function soakLlm(s: RunSetup, cycled: () => boolean) {
  const llm = { outage: 0, failed: 0, overlaps: [] as string[], finishes: new Map<number, number>() }
  const pending = new Map<number, number>()
  let n = 0
  s.fake.fallback = (req) => {
    if (!Array.isArray(req.body.tools)) return { content: '## Original Task\nlook around\n## Current State\n- looking' }
    const task = Number(/\(fleet task (\d+)\)/.exec(JSON.stringify(req.body.messages))?.[1] ?? -1)
    if (llm.outage > 0) {
      llm.outage--
      llm.failed++
      return { status: 503, content: 'the server is overloaded' }
    }
    if ((pending.get(task) ?? 0) > 0) llm.overlaps.push(`fleet task ${task}: a request arrived while another for it waited for its answer`)
    pending.set(task, (pending.get(task) ?? 0) + 1)
    const delayMs = cycled() ? 20 : 150
    // Registered before the server's own timer of the same length: it runs first, just before the answer goes out.
    setTimeout(() => pending.set(task, (pending.get(task) ?? 1) - 1), delayMs)
    if (cycled() && req.body.messages.filter((m) => m.role === 'assistant').length >= TURNS) {
      llm.finishes.set(task, (llm.finishes.get(task) ?? 0) + 1)
      return { delayMs, ...finish }
    }
    return { delayMs, calls: [{ name: 'glob', arguments: { pattern: `*${n++}*` } }] }
  }
  return llm
}

function tally(xs: string[]): Map<string, number> {
  const out = new Map<string, number>()
  for (const x of xs) out.set(x, (out.get(x) ?? 0) + 1)
  return out
}

describe('torture: a fleet under chaos', () => {
  it(`${TASKS} tasks on ${HOSTS.length} workers while agents, workers, warm children and PostgreSQL are killed, a worker frozen and the LLM down: 0 lost, 0 run twice, 0 stuck`, {
    timeout: FULL ? 3_600_000 : 900_000,
  }, async () => {
    const s = await runSetup(`${FAST_LOCKS}  max_attempts: 8\n  retry:\n    base_seconds: 0.1\n    max_seconds: 0.5\n    max_attempts: 20\n`)
    const injected = Object.fromEntries(CHAOS.map((c) => [c, 0])) as Record<(typeof CHAOS)[number], number>
    const llm = soakLlm(s, () => CHAOS.every((c) => injected[c] > 0))
    const args = ['--concurrency', String(CONCURRENCY)]
    const workers: ChaosWorker[] = HOSTS.map((h) => chaosWorker(s, database.server.url, h, args))
    await Promise.all(workers.map((w) => until('a worker to start', async () => w.err().includes('started on'))))

    const uuids: string[] = []
    for (let i = 0; i < TASKS; i++) {
      const res = await s.run(['enqueue', '--task', `look around (fleet task ${i})`, '--workspace', s.ws, '--max-turns', '100000'], db())
      expect(res.code, res.stderr).toBe(0)
      uuids.push(res.stdout.trim())
    }

    // watch-locks passes, one after the other, until the soak ends (they fail while PostgreSQL is down).
    let soaking = true
    const passes = { ok: 0, failed: 0, lastRefusal: '' }
    const passLoop = (async () => {
      while (soaking) {
        const res = await s.run(['watch-locks', '--once'], db())
        if (res.code === 0) passes.ok++
        else {
          passes.failed++
          passes.lastRefusal = `exit ${res.code}: ${res.stderr.slice(-600)}`
        }
      }
    })()

    const settled = async (): Promise<boolean> => {
      const rows = await jobs()
      return (
        rows.length >= TASKS &&
        rows.every((j) => !OPEN.includes(j.state)) &&
        readdirSync(s.tree.layout.dir('running')).filter((n) => !n.startsWith('.')).length === 0
      )
    }
    const random = <T>(xs: T[]): T | undefined => xs[Math.floor(Math.random() * xs.length)]
    const timeline: string[] = []
    const inject = async (what: (typeof CHAOS)[number]): Promise<void> => {
      const live = workers.filter((w) => !w.exited())
      timeline.push(`${new Date().toISOString().slice(11, 23)} ${what}`)
      if (what === 'agent') {
        const h = random(holders(s.tree.base, workers))
        if (h === undefined) return
        timeline.push(`agent of ${h.uuid.slice(0, 8)} (pid ${h.pid})`)
        process.kill(h.pid, 'SIGKILL')
      } else if (what === 'worker') {
        const w = random(live)
        if (w === undefined) return
        await w.kill()
        const again = chaosWorker(s, database.server.url, HOSTS.includes(w.host) ? w.host : null, args)
        workers.push(again)
        await until('the new worker to start', async () => again.err().includes('started on'))
      } else if (what === 'warm') {
        const pid = random(warmChildren(s.tree.base, workers))
        if (pid === undefined) return
        timeline.push(`warm pid ${pid}`)
        process.kill(pid, 'SIGKILL')
      } else if (what === 'freeze') {
        const w = random(live)
        if (w === undefined) return
        process.kill(w.pid(), 'SIGSTOP')
        // Past the time its row counts as live (2 × locks.stale_after_seconds), by the database's clock; then a pass.
        await until(
          'the frozen worker’s row stale',
          async () =>
            (
              await query(
                `SELECT 1 FROM fleet_workers WHERE hostname = $1 AND pid = $2 AND stopped_at IS NULL AND heartbeat_at < now() - interval '3 seconds'`,
                [w.host, w.hostPid()],
              )
            ).length > 0,
        )
        const after = passes.ok
        await until('a watch-locks pass while it is frozen', async () => passes.ok > after).catch((err: Error) => {
          throw new Error(`${err.message} (${passes.failed} refused in all; the last: ${passes.lastRefusal || 'none'})`)
        })
        process.kill(w.pid(), 'SIGCONT')
      } else if (what === 'postgres') {
        await database.server.kill()
        const failedBefore = passes.failed
        await until('a watch-locks pass refused while PostgreSQL is down', async () => passes.failed > failedBefore)
        await database.server.restart()
      } else {
        llm.outage = Math.max(3, CONCURRENCY * 2)
        await until('the outage answered', async () => llm.outage === 0 || (await settled()))
      }
      injected[what]++
    }

    // Chaos at points counted in agent requests, one event at a time, until every job has settled.
    const bound = FULL ? 60_000 : 12_000 // × 50 ms polls: only the give-up point
    let next = STEP
    for (let i = 0; ; i++) {
      const point = await until(
        'the next chaos point, or every job settled',
        async () => ((await settled()) ? 'settled' : agentRequests(s.fake).length >= next ? 'chaos' : null),
        bound,
      )
      if (point === 'settled') break
      await inject(CHAOS[i % CHAOS.length] as (typeof CHAOS)[number])
      next = agentRequests(s.fake).length + STEP
    }
    // Settled: one more pass over a quiet fleet must find nothing to do.
    soaking = false
    await passLoop
    for (const w of workers.filter((x) => !x.exited())) expect(await w.stop(), w.err().slice(-2000)).toBe(0)
    const last = await s.run(['watch-locks', '--once'], db())
    expect(last.code, last.stderr).toBe(0)

    // 0 stuck: no open job, nothing in running/.
    const rows = await jobs()
    const open = rows.filter((j) => OPEN.includes(j.state)).map((j) => `job ${j.id} (task ${j.task_uuid}) is ${j.state}`)
    expect(open).toEqual([])
    expect(readdirSync(s.tree.layout.dir('running')).filter((n) => !n.startsWith('.'))).toEqual([])

    // 0 lost: every task completed, or failed with its reason after its attempts.
    const problems: string[] = []
    let completed = 0
    const failed: string[] = []
    for (const [i, uuid] of uuids.entries()) {
      const name = `fleet task ${i} (${uuid})`
      const mine = rows.filter((j) => j.task_uuid === uuid)
      const lastJob = mine.at(-1)
      if (lastJob === undefined) {
        problems.push(`${name}: no job`)
        continue
      }
      let task
      try {
        task = readTask(s.tree, uuid)
      } catch {
        problems.push(`${name}: nowhere in the tree (jobs: ${mine.map((j) => `${j.kind} ${j.state} ${j.outcome}`).join(', ')})`)
        continue
      }
      // 0 run twice: seq continuous, one final answer recorded (a finish call a crash cut short is answered as aborted: not an answer).
      const seqs = task.messages.map((m) => m.seq)
      if (seqs.some((seq, k) => seq !== k + 1)) problems.push(`${name}: messages.jsonl seq not continuous: ${seqs.join(',')}`)
      const finishes = task.tools.filter((t) => t.tool_name === 'finish' && t.status === 'success').length
      if (task.location === 'completed' && task.state.status === 'completed') {
        completed++
        if (finishes !== 1) problems.push(`${name}: ${finishes} final answers recorded`)
        if (lastJob.state !== 'done' || lastJob.outcome !== 'completed')
          problems.push(
            `${name}: completed but its last job is ${lastJob.state} ${lastJob.outcome} (jobs: ${mine.map((j) => `${j.id} ${j.kind} ${j.state} ${j.outcome}: ${j.error}`).join('; ')})`,
          )
      } else if (lastJob.state === 'failed' || (task.location === 'completed' && task.state.status === 'failed')) {
        if (!lastJob.error) problems.push(`${name}: failed with no reason`)
        failed.push(`${name}: ${task.location} ${String(task.state.status)}: ${lastJob.error}`)
      } else {
        problems.push(`${name}: left ${task.location} ${String(task.state.status)} with its last job ${lastJob.state} ${lastJob.outcome} (${lastJob.error})`)
      }
      if (mine.filter((j) => j.kind === 'new').length !== 1) problems.push(`${name}: ${mine.filter((j) => j.kind === 'new').length} new jobs`)
    }
    // What the workers said of each job or task in trouble, and when each chaos event struck: for the next reader of a failure.
    if (problems.length > 0) {
      const named = problems.flatMap((p) => [...p.matchAll(/[0-9a-f]{8}-[0-9a-f-]{27}|\(jobs: (\d+)|; (\d+) /g)].map((m) => m[1] ?? m[2] ?? m[0]))
      const said = workers.flatMap((w, k) =>
        w
          .err()
          .split('\n')
          .filter((l) => named.some((x) => l.includes(/^\d+$/.test(x) ? `job ${x}:` : x) || l.includes(/^\d+$/.test(x) ? `job ${x} ` : x)))
          .map((l) => `worker ${k} (${w.host}): ${l.slice(0, 400)}`),
      )
      console.error(`chaos: ${timeline.join('; ')}\n${said.join('\n')}`)
    }
    expect(problems).toEqual([])
    expect(llm.overlaps).toEqual([])

    // The index equals the tree (a write missed while PostgreSQL was down is reindex's to repair, docs/contract.md §14.3).
    const places = taskPlaces(s.tree.base)
    const indexed = async () =>
      Object.fromEntries((await query<{ uuid: string; location: string }>('SELECT uuid, location FROM tasks')).map((r) => [r.uuid, r.location]))
    const before = await indexed()
    const drift = Object.keys({ ...places, ...before }).filter((u) => places[u] !== before[u])
    const reindex = await s.run(['reindex'], db())
    expect(reindex.code, reindex.stderr).toBe(0)
    expect(await indexed()).toEqual(places)
    expect(Object.keys(places).sort()).toEqual([...uuids].sort())

    // Every file readable, no litter, no stray lock.
    expect(unreadable(s.tree.base)).toEqual([])
    expect(litter(s.tree.base)).toEqual([])
    expect(strayLocks(s.tree.base)).toEqual([])
    expect(existsSync(join(s.tree.base, 'running'))).toBe(true)

    record('fleet', {
      tasks: TASKS,
      workers: `${workers.length} (${HOSTS.length} at a time${HOSTS[0] === null ? '' : ', 3 of them on simulated hosts'})`,
      chaos: Object.entries(injected)
        .map(([k, v]) => `${k} ${v}`)
        .join(' / '),
      llm_503s: llm.failed,
      watch_locks_passes: `${passes.ok} ok, ${passes.failed} refused`,
      jobs: `${rows.length} (${[...tally(rows.map((j) => `${j.kind} ${j.state} ${j.outcome ?? '-'}`))].map(([k, v]) => `${k} ${v}`).join(', ')})`,
      completed,
      failed_after_attempts: failed.length,
      lost: 0,
      run_twice: 0,
      stuck: 0,
      index_rows_reindex_repaired: drift.length,
    })
    expect(
      Object.entries(injected)
        .filter(([, v]) => v === 0)
        .map(([k]) => k),
      'chaos never injected',
    ).toEqual([])
  })
})
