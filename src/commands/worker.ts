import { randomBytes } from 'node:crypto'
import { Socket } from 'node:net'
import { Command, Option } from 'commander'
import type { CommandEnv, GlobalOptions } from '../command-env.js'
import { loadConfig } from '../config/load.js'
import { PgStore } from '../storage/index/pg-store.js'
import { auditTask, fleetDatabaseUrl } from '../command-env.js'
import { markStopped, registerWorker } from '../fleet/worker/registry.js'
import type { WorkerRecord } from '../fleet/worker/registry.js'
import { cannotServe } from '../fleet/worker/abilities.js'
import type { WorkerAbilities } from '../fleet/worker/abilities.js'
import { createWorkerLog } from '../fleet/worker/worker-log.js'
import type { WorkerLog } from '../fleet/worker/worker-log.js'
import { CtxError } from '../errors.js'
import { isTransientPgError, pgReason } from '../storage/index/pg-pool.js'
import { planSandbox } from '../tools/sandbox.js'
import type { Pool } from 'pg'
import { WARM_CHILD_FLAG } from '../fleet/worker/agent-launcher.js'
import { warmFetch } from '../fleet/worker/warm-fetch.js'
import { keepCompiledCode } from '../compile-cache.js'
import { Worker } from '../fleet/worker/worker.js'
import type { Config } from '../config/schema.js'
import { hostname } from '../storage/fs/process-info.js'
import { ensureLayout } from '../storage/task/lifecycle.js'
import { giveWorkspace, sandboxIdentity } from '../tools/sandbox/identity.js'
import { fleetListenUrl, fleetPool } from '../actions/fleet-db.js'
import { claimBudget } from '../fleet/queue/claim-budget.js'
import { pause, positiveIntArg, withEnv } from '../command-kit/shared.js'
import { workerLiveSeconds } from '../storage/index/worker-liveness.js'
import { cloneCredentials } from '../workspace/clone.js'

interface WorkerOptions {
  concurrency: number
  warmChild?: boolean
  prestart: boolean
  logFormat?: 'text' | 'json'
}

/**
 * `runCli` is the CLI's main, which a warm child runs its task with, and `loadCli` its program
 * for a command line, which a warm child builds for `run` before its job (its modules loaded):
 * cli.ts passes both, a command never imports the program above it.
 */
export function workerCommand(runCli: (argv: string[]) => Promise<void>, loadCli: (argv: string[]) => Promise<unknown>): Command {
  return (
    new Command('worker')
      .description(
        "take the fleet's jobs and run each task as run does, each in its own process (needs fleet.database_url); SIGTERM/SIGINT pause them and exit 0",
      )
      .option('--concurrency <n>', 'tasks run at once', positiveIntArg, 1)
      // Not for operators: each task starts in a child started without one warm ahead of its job (for benchmarks).
      .addOption(new Option('--no-prestart').hideHelp())
      // Not for operators: the warm child a worker starts ahead of its next job.
      .addOption(new Option(WARM_CHILD_FLAG).hideHelp())
      .addOption(
        new Option('--log-format <format>', "log lines on stderr: text, or json (every line one JSON object, its tasks' lines included)").choices([
          'text',
          'json',
        ]),
      )
      .action((opts: WorkerOptions, command: Command) => {
        if (opts.warmChild === true) return warmChild(command, runCli, loadCli)
        // The signals are handled before anything else (config, database): see StopRequests.
        const stop = stopRequests()
        return withEnv((ctx: CommandEnv, o: WorkerOptions) => worker(ctx, o, stop))(opts, command).finally(() => stop.dispose())
      })
  )
}

/**
 * A worker's warm child: node started and the CLI loaded before there is a job, then
 * waiting on fd 3 for one line, {"args": [...]}, the command line of its task, which it
 * runs as if started with it (same global flags: the worker's --home and --config).
 * fd 3 closing without a line (the worker stopped or died) ends it quietly.
 */
async function warmChild(command: Command, runCli: (argv: string[]) => Promise<void>, loadCli: (argv: string[]) => Promise<unknown>): Promise<void> {
  const preload = warmUp(command, loadCli)
  const args = await controlLine()
  await preload
  if (args === null) {
    // Its worker stopped or died (fd 3's end): the connection opened ahead must not keep an orphan alive.
    await PgStore.dropAhead()
    return
  }
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
 * the modules run loads on demand (the `run` command's program, its work, the database
 * client and the index's store, uuids, the state and task locks, the tools' argument
 * checks), the config parsed once (dropped: the task reads it again, it may have changed),
 * the PostgreSQL index connected (the task's open takes it), the random source opened
 * (temp file names), an LLM client made (dropped), fetch's HTTP client loaded and its
 * parser compiled by one request on loopback (the LLM requests; warm-fetch.ts). Nothing of a
 * job is known yet, and nothing here is kept for it but what Node caches (modules) and the
 * index's connection.
 */
async function warmUp(command: Command, loadCli: (argv: string[]) => Promise<unknown>): Promise<void> {
  await Promise.all([
    loadCli([...process.argv.slice(0, 2), 'run']),
    import('../run/run-task.js'),
    // What the task imports at its index's open (the store's small entry module: its code is in the worker's own
    // chunks) and at its first tool call (zod, for the tools' arguments).
    import('../storage/index/pg-store.js'),
    import('../tools/arguments.js'),
    import('pg'),
    import('uuid'),
    import('proper-lockfile'),
  ]).catch(() => undefined)
  try {
    const { config } = loadConfig({ flag: command.optsWithGlobals<GlobalOptions>().config, env: process.env, cwd: process.cwd() })
    // The task's PostgreSQL index, connected now (one connection while it waits).
    const url = fleetDatabaseUrl({ config, env: process.env })
    if (url !== null) PgStore.openAhead(url)
    // One LLM client made and dropped: the SDK's constructors run once (the task makes its own, from its config).
    const { createLlmClient } = await import('../llm/providers.js')
    createLlmClient(config)
  } catch {
    // the task says what is wrong with it
  }
  randomBytes(4)
  await warmFetch()
  // Kept compiled now (Node 22.10+): a warm child that never gets a job ends when its worker does, often by a signal.
  keepCompiledCode()
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

/**
 * SIGTERM/SIGINT handled from the worker's first instant (its start-up takes seconds
 * under load, and a stop then must not kill it by the signal): a stop before it runs
 * ends its waits at once; once it runs, its tasks pause and it exits 0 (docs/contract.md §14.2).
 */
interface StopRequests {
  stopped: Promise<void>
  requested: () => boolean
  /** Called on this and every later stop. */
  onStop(fn: () => void): void
  dispose(): void
}

function stopRequests(): StopRequests {
  let requested = false
  let listeners: (() => void)[] = []
  let resolve = (): void => undefined
  const stopped = new Promise<void>((r) => (resolve = r))
  const handler = (): void => {
    requested = true
    resolve()
    for (const fn of listeners) fn()
  }
  process.on('SIGTERM', handler)
  process.on('SIGINT', handler)
  return {
    stopped,
    requested: () => requested,
    onStop: (fn) => {
      listeners.push(fn)
      if (requested) fn()
    },
    dispose: () => {
      listeners = []
      process.off('SIGTERM', handler)
      process.off('SIGINT', handler)
    },
  }
}

async function worker(ctx: CommandEnv, opts: WorkerOptions, stop: StopRequests): Promise<void> {
  const log = createWorkerLog(opts.logFormat ?? 'text')
  const logged: CommandEnv = log.format === 'text' ? ctx : { ...ctx, io: { ...ctx.io, warn: (text) => log.warn(text) } }
  if (ctx.configNotice !== null) logged.io.warn(ctx.configNotice)
  try {
    await serve(logged, opts, stop, log)
  } catch (err) {
    if (log.format === 'text' || !(err instanceof Error)) throw err
    // Every line JSON: the refusal too, then the exit code alone.
    const e = err as Partial<CtxError>
    process.stderr.write(
      `${JSON.stringify({ ts: new Date().toISOString(), level: 'error', msg: err.message, ...(e.hint ? { hint: e.hint } : {}), exit_code: e.exitCode ?? 1 })}\n`,
    )
    throw new CtxError(err.message, { exitCode: e.exitCode ?? 1, logged: true })
  }
}

async function serve(ctx: CommandEnv, opts: WorkerOptions, stop: StopRequests, log: WorkerLog): Promise<void> {
  const locks = ctx.config.locks
  const liveSeconds = workerLiveSeconds(locks)
  const up = await whenDatabaseUp(ctx, opts, stop, log, liveSeconds)
  if (up === null) {
    log.info('stopped before it started')
    return
  }
  const { pool, url, record } = up
  let running: Worker | null = null
  try {
    log.setId(record.id)
    // The first worker of a fleet makes the shared tree (docs/contract.md §14.5).
    if (!ctx.layout.exists()) log.info(`created the task tree at ${ctx.layout.base}`)
    ensureLayout({ layout: ctx.layout, config: ctx.config, index: null, now: () => ctx.now(), warn: (m) => ctx.io.warn(m) })
    auditTask(ctx, 'worker', null)
    // Each task runs as this very program's `run`, with the same tree and config.
    const command = [
      process.execPath,
      ...process.execArgv,
      process.argv[1] as string,
      '--home',
      ctx.layout.base,
      ...(ctx.configSource !== null ? ['--config', ctx.configSource] : []),
    ]
    const abilities = abilitiesOf(ctx.config)
    running = new Worker({
      url: fleetListenUrl(ctx, url),
      pool,
      record,
      layout: ctx.layout,
      command,
      warmChild: opts.prestart,
      pollMs: ctx.config.fleet.poll_seconds * 1000,
      workspacesDir: ctx.config.fleet.workspaces_dir,
      cloneCredentials: cloneCredentials(ctx.config),
      giveClone: (dir) => giveWorkspace(dir, sandboxIdentity(ctx.config.tools, dir)),
      maxAttempts: ctx.config.fleet.max_attempts,
      agentNiceness: ctx.config.fleet.agent_niceness,
      retry: ctx.config.fleet.retry,
      perUser: ctx.config.fleet.limits.per_user,
      budget: claimBudget(ctx.config, ctx.osUser),
      now: () => ctx.now(),
      heartbeatMs: locks.heartbeat_seconds * 1000,
      log: (line) => log.info(line),
      warn: (line) => log.warn(line),
      error: (line) => log.error(line),
      refuse: (job) => cannotServe(job, abilities),
      relay: (pid) => log.relay(pid),
    })
    const started = running
    stop.onStop(() => started.stop())
    log.info(`started on ${record.hostname}, ${opts.concurrency} at a time`)
    await running.run()
    log.info('stopped')
  } finally {
    await pool.end().catch(() => undefined)
  }
}

/**
 * Connects, migrates and registers, waiting with backoff while the database cannot be
 * reached (docs/contract.md §14.5: a worker started before PostgreSQL, or during an outage, waits
 * as a running one does); null when a stop came first. A refusal that stays (a wrong
 * password, a missing right, a host name in use) is an error at once.
 */
async function whenDatabaseUp(
  ctx: CommandEnv,
  opts: WorkerOptions,
  stop: StopRequests,
  log: WorkerLog,
  liveSeconds: number,
): Promise<{ pool: Pool; url: string; record: WorkerRecord } | null> {
  for (let attempt = 0; ; attempt++) {
    const connecting = (async () => {
      const { pool, url } = await fleetPool(ctx, 'worker', opts.concurrency + 2)
      try {
        return { pool, url, record: await registerWorker(pool, hostname(), opts.concurrency, liveSeconds) }
      } catch (err) {
        await pool.end().catch(() => undefined)
        throw err
      }
    })()
    const first = await Promise.race([
      connecting.then(
        (up) => ({ up }),
        (err: unknown) => ({ err }),
      ),
      stop.stopped.then(() => null),
    ])
    if (first === null) {
      // Stopped while connecting: whatever it connects is closed, and its registration marked stopped.
      void connecting.then(
        async (up) => {
          await markStopped(up.pool, up.record.id).catch(() => undefined)
          await up.pool.end().catch(() => undefined)
        },
        () => undefined,
      )
      return null
    }
    if ('up' in first) return first.up
    const err = first.err
    const cause = err instanceof CtxError ? (err.cause ?? null) : err
    if (cause === null || !isTransientPgError(cause)) throw err
    const delay = Math.min(500 * 2 ** attempt, 30_000) * (0.75 + Math.random() / 2)
    log.warn(`the fleet's database cannot be reached (${pgReason(cause)}); trying again in ${(delay / 1000).toFixed(1)} s`)
    if (!(await pause(delay, stop.stopped))) return null
  }
}

/** What this worker can serve, from its own configuration: checked once, at start. */
function abilitiesOf(config: Config): WorkerAbilities {
  // Whether bwrap works here: the identity does not matter for that (a job's own workspace decides it at its start).
  const sandbox = planSandbox(config.tools, [], config.fleet.workspaces_dir ?? '/')
  const sandboxProblem = sandbox.ok ? null : sandbox.why
  return {
    workspacesDir: config.fleet.workspaces_dir,
    githubToken: config.github.token !== null,
    gitlabToken: config.gitlab.token !== null,
    shellProblem: config.tools.shell ? sandboxProblem : null,
    sandboxProblem,
  }
}
