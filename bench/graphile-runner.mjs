// The fleet bench's baseline worker (bench/fleet-baseline.mjs): graphile-worker, in a process
// of its own as `ctxagent worker` is, with one task, `ctxagent`, that runs the job's task as
// `node bin/ctxagent run` (what a graphile-worker fleet of ctxagent would do) and waits for it.
//
// Environment: GW_DATABASE_URL, GW_CONCURRENCY; the child's own (CTXAGENT_HOME, CTXAGENT_CONFIG,
// CTXAGENT_DATABASE_URL) is this process's. Says "ready" on stdout once it runs, then
// "done <tag> <exit code> <most jobs running at once so far>" for each job ended.
import { spawn } from 'node:child_process'
import { join } from 'node:path'
import { Logger, run } from 'graphile-worker'
import { ROOT } from './lib.mjs'

const BIN = join(ROOT, 'bin', 'ctxagent')

let running = 0
let most = 0
const runner = await run({
  connectionString: process.env.GW_DATABASE_URL,
  concurrency: Number(process.env.GW_CONCURRENCY ?? 1),
  noHandleSignals: true,
  logger: new Logger(() => () => undefined),
  taskList: {
    ctxagent: async (payload) => {
      most = Math.max(most, ++running)
      const code = await new Promise((resolve) => {
        const child = spawn(process.execPath, [BIN, 'run', '--task-file', '-', '--workspace', payload.workspace, '--log-format', 'json'], {
          stdio: ['pipe', 'ignore', 'ignore'],
        })
        child.stdin.end(payload.task)
        child.on('close', resolve)
      })
      running--
      process.stdout.write(`done ${payload.tag} ${code} ${most}\n`)
      if (code !== 0) throw new Error(`ctxagent run exited ${code}`)
    },
  },
})
process.stdout.write('ready\n')
process.on('SIGTERM', () => void runner.stop().then(() => process.exit(0)))
await runner.promise
