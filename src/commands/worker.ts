import { randomBytes } from 'node:crypto'
import { Socket } from 'node:net'
import { Command, Option } from 'commander'
import type { CommandEnv, GlobalOptions } from '../command-env.js'
import { loadConfig } from '../config/load.js'
import { PgStore } from '../storage/index/pg-store.js'
import { auditTask, fleetDatabaseUrl } from '../command-env.js'
import { registerWorker } from '../fleet/registry.js'
import { WARM_CHILD_FLAG, Worker } from '../fleet/worker.js'
import type { CloneCredential } from '../fleet/clone.js'
import type { Config } from '../config/schema.js'
import { hostname } from '../storage/fs/process-info.js'
import { ensureLayout } from '../storage/task/lifecycle.js'
import { fleetPool } from './fleet-db.js'
import { positiveIntArg, withEnv } from './shared.js'

interface WorkerOptions {
  concurrency: number
  warmChild?: boolean
  prestart: boolean
}

/** `runCli` is the CLI's main (cli.ts passes it: a command never imports the program above it), which a warm child runs its task with. */
export function workerCommand(runCli: (argv: string[]) => Promise<void>): Command {
  return new Command('worker')
    .description("take the fleet's jobs and run each task as run does, each in its own process (needs fleet.database_url); SIGTERM/SIGINT pause them and exit 0")
    .option('--concurrency <n>', 'tasks run at once', positiveIntArg, 1)
    // Not for operators: each task starts in a child started without one warm ahead of its job (for benchmarks).
    .addOption(new Option('--no-prestart').hideHelp())
    // Not for operators: the warm child a worker starts ahead of its next job.
    .addOption(new Option(WARM_CHILD_FLAG).hideHelp())
    .action((opts: WorkerOptions, command: Command) => (opts.warmChild === true ? warmChild(command, runCli) : withEnv(worker)(opts, command)))
}

/**
 * A worker's warm child: node started and the CLI loaded before there is a job, then
 * waiting on fd 3 for one line, {"args": [...]}, the command line of its task, which it
 * runs as if started with it (same global flags: the worker's --home and --config).
 * fd 3 closing without a line (the worker stopped or died) ends it quietly.
 */
async function warmChild(command: Command, runCli: (argv: string[]) => Promise<void>): Promise<void> {
  const preload = warmUp(command)
  const args = await controlLine()
  if (args === null) return
  await preload
  // Errors name the command the task runs (cli.ts reads process.argv), not this one, and
  // so does ps: `ctxagent run --uuid …` (cut to the length of the command line it started with).
  process.argv = [...process.argv.slice(0, process.argv.lastIndexOf('worker')), ...args]
  process.title = ['ctxagent', ...args].join(' ')
  try {
    await runCli(process.argv)
  } finally {
    // Not taken (the task never opened its index, or another one): its connection must not keep this process alive.
    await PgStore.dropAhead()
  }
}

/**
 * What every task does first and costs most the first time, done before there is one:
 * the modules run loads on demand (its work, the database client, uuids), the config
 * parsed once (dropped: the task reads it again, it may have changed), the PostgreSQL
 * index connected (the task's open takes it), the random source opened (temp file
 * names), fetch's HTTP client loaded (the LLM requests).
 */
async function warmUp(command: Command): Promise<void> {
  await Promise.all([import('../run/run-task.js'), import('pg'), import('uuid')]).catch(() => undefined)
  try {
    const { config } = loadConfig({ flag: command.optsWithGlobals<GlobalOptions>().config, env: process.env, cwd: process.cwd() })
    // The task's PostgreSQL index, connected now (one connection while it waits).
    const url = fleetDatabaseUrl({ config, env: process.env })
    if (url !== null) PgStore.openAhead(url)
  } catch {
    // the task says what is wrong with it
  }
  randomBytes(4)
  await fetch('data:,').catch(() => undefined)
}

function controlLine(): Promise<string[] | null> {
  return new Promise((resolve) => {
    let control: Socket
    try {
      control = new Socket({ fd: 3, readable: true, writable: false })
    } catch {
      // Not started by a worker (no fd 3): nothing to run.
      resolve(null)
      return
    }
    let text = ''
    const done = (args: string[] | null): void => {
      control.destroy()
      resolve(args)
    }
    control.setEncoding('utf8')
    control.on('data', (chunk: string) => {
      text += chunk
      const end = text.indexOf('\n')
      if (end < 0) return
      let line: { args?: unknown } = {}
      try {
        line = JSON.parse(text.slice(0, end)) as { args?: unknown }
      } catch {
        // not a job: nothing to run
      }
      done(Array.isArray(line.args) && line.args.every((a) => typeof a === 'string') ? (line.args as string[]) : null)
    })
    control.on('end', () => done(null))
    control.on('error', () => done(null))
  })
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
    running = new Worker({ url, pool, record, layout: ctx.layout, command, warmChild: opts.prestart, pollMs: ctx.config.fleet.poll_seconds * 1000, workspacesDir: ctx.config.fleet.workspaces_dir, cloneCredentials: cloneCredentials(ctx.config), maxAttempts: ctx.config.fleet.max_attempts, heartbeatMs: locks.heartbeat_seconds * 1000, log })
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

/**
 * The forge tokens a worker gives git for `--repo` clones (SPEC §8: never in the URL or
 * the clone): github.token (GH_TOKEN, GITHUB_TOKEN) for the GitHub of github.api_url,
 * gitlab.token (GITLAB_TOKEN) for gitlab.url's host. Other hosts: git's own credential
 * helpers, as configured for the worker's user.
 */
export function cloneCredentials(config: Config): CloneCredential[] {
  const credentials: CloneCredential[] = []
  if (config.github.token !== null) {
    const api = new URL(config.github.api_url)
    credentials.push({ host: api.host === 'api.github.com' ? 'github.com' : api.host, username: 'x-access-token', token: config.github.token })
  }
  if (config.gitlab.token !== null) credentials.push({ host: new URL(config.gitlab.url).host, username: 'oauth2', token: config.gitlab.token })
  return credentials
}
