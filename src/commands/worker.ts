import { Command } from 'commander'
import type { CommandEnv } from '../command-env.js'
import { auditTask } from '../command-env.js'
import { registerWorker } from '../fleet/registry.js'
import { Worker } from '../fleet/worker.js'
import { hostname } from '../storage/fs/process-info.js'
import { ensureLayout } from '../storage/task/lifecycle.js'
import { fleetPool } from './fleet-db.js'
import { positiveIntArg, withEnv } from './shared.js'

interface WorkerOptions {
  concurrency: number
}

export function workerCommand(): Command {
  return new Command('worker')
    .description("take the fleet's jobs and run each task as run does, each in its own process (needs fleet.database_url); SIGTERM/SIGINT pause them and exit 0")
    .option('--concurrency <n>', 'tasks run at once (default 1)', positiveIntArg, 1)
    .action(withEnv(worker))
}

async function worker(ctx: CommandEnv, opts: WorkerOptions): Promise<void> {
  const { pool, url } = await fleetPool(ctx, 'worker', opts.concurrency + 2)
  let running: Worker | null = null
  try {
    const locks = ctx.config.locks
    const liveSeconds = locks.stale_after_remote_seconds ?? 2 * locks.stale_after_seconds
    const record = await registerWorker(pool, hostname(), opts.concurrency, liveSeconds)
    ensureLayout({ layout: ctx.layout, config: ctx.config, index: null, now: () => ctx.now(), warn: (m) => ctx.io.warn(m) })
    auditTask(ctx, 'worker', null)
    const log = (line: string): void => ctx.io.err(`ctxagent worker ${record.id}: ${line}\n`)
    // Each task runs as this very program's `run`, with the same tree and config.
    const command = [process.execPath, ...process.execArgv, process.argv[1] as string, '--home', ctx.layout.base, ...(ctx.configSource !== null ? ['--config', ctx.configSource] : [])]
    running = new Worker({ url, pool, record, layout: ctx.layout, command, pollMs: ctx.config.fleet.poll_seconds * 1000, workspacesDir: ctx.config.fleet.workspaces_dir, maxAttempts: ctx.config.fleet.max_attempts, heartbeatMs: locks.heartbeat_seconds * 1000, log })
    const stop = (): void => running?.stop()
    process.on('SIGTERM', stop)
    process.on('SIGINT', stop)
    log(`started on ${record.hostname}, ${opts.concurrency} at a time`)
    await running.run()
    log('stopped')
    process.off('SIGTERM', stop)
    process.off('SIGINT', stop)
  } finally {
    await pool.end().catch(() => undefined)
  }
}
