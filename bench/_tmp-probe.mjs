import { randomUUID } from 'node:crypto'
import pg from 'pg'
import { remove } from './lib.mjs'
import { cli, setup, sleep, startLlm, startPostgres, startWorker, truncateJobs, waitDone } from './fleet-lib.mjs'
const N = Number(process.env.N ?? 4)
const server = await startPostgres()
const llm = await startLlm()
const db = server.url
await cli(['fleet', '--json'], { CTXAGENT_DATABASE_URL: db, CTXAGENT_HOME: '/tmp/probe-home' })
await truncateJobs(db)
const { home, ws, env } = setup('probe', llm, db)
env.CTXAGENT_PROBE = '1'
const worker = await startWorker(env, process.argv.includes('--cold') ? ['--no-prestart'] : [])
try {
  for (let i = 0; i < N; i++) {
    await sleep(1500)
    const from = worker.lines.length
    const tag = `p-${randomUUID().slice(0, 8)}`
    const done = await cli(['enqueue', '--task', `bench:${tag} turns:1`, '--workspace', ws], env)
    const uuid = done.out.trim()
    while (!llm.tasks.has(tag)) await sleep(2)
    await waitDone(db, i + 1, tag)
    const c = new pg.Client({ connectionString: db }); await c.connect()
    const q = Number((await c.query('SELECT extract(epoch FROM created_at) * 1000 AS at FROM fleet_jobs WHERE task_uuid = $1', [uuid])).rows[0].at); await c.end()
    console.log(`--- task ${i}: enqueue returned +${(done.at - q).toFixed(0)}; first request +${(llm.tasks.get(tag).first - q).toFixed(0)}`)
    let prev = q
    for (const l of worker.lines.slice(from)) {
      const m = /PROBE (\d+) (\S+) ([\d.]+)/.exec(l.line)
      if (m) { const t = Number(m[3]); console.log(`  ${m[2].padEnd(22)} +${(t - q).toFixed(0).padStart(6)}  (Δ ${(t - prev).toFixed(0)})`); prev = t }
      else if (/starting|started|^GIT/.test(l.line) || l.line.includes("GIT ")) console.log(`  [line arrived +${(l.at - q).toFixed(0)}] ${l.line.slice(0, 100)}`)
    }
  }
} finally { await worker.stop(); remove(home); await llm.close(); await server.stop() }
