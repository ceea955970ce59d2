import { spawn, spawnSync } from 'node:child_process'
import type { ChildProcess } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { onTestFinished } from 'vitest'
import type { RunSetup } from '../run/harness.js'
import { BIN } from './run.js'

/**
 * Fleet hosts simulated on this machine. A worker "on another host" runs in a UTS
 * namespace of its own (its host name, which its tasks' locks record) and a PID
 * namespace of its own (it cannot see the other host's pids, and SIGKILL to its PID 1
 * ends everything on that "host" at once, as a crash would). Needs root and unshare.
 */
export const canUnshare = process.getuid?.() === 0 && spawnSync('unshare', ['--uts', '--pid', '--fork', 'true']).status === 0

/** Locks that go stale in a second, and a worker that polls twice a second: recoveries happen within a test's time. */
export const FAST_LOCKS = 'locks:\n  heartbeat_seconds: 0.2\n  stale_after_seconds: 1\nfleet:\n  poll_seconds: 0.5\n'

export const finish = { calls: [{ name: 'finish', arguments: { summary: 'done', status: 'done' } }] }

/** A model that never finishes: each turn looks for another file (a task under way until it is stopped). */
export function endless(s: RunSetup): void {
  let n = 0
  s.fake.fallback = () => ({ calls: [{ name: 'glob', arguments: { pattern: `*${n++}*` } }] })
}

export { until } from './wait.js'

/**
 * The pid of the agent that holds task `uuid` in running/ now (its .lock says so), or null.
 * (Not a worker's child: a worker may also keep an idle pre-started child.)
 */
export function agentPid(s: RunSetup, uuid: string): number | null {
  try {
    const pid = (JSON.parse(readFileSync(join(s.tree.layout.taskDir('running', uuid), '.lock'), 'utf8')) as { process_id?: unknown }).process_id
    return typeof pid === 'number' && pid > 0 ? pid : null
  } catch {
    return null
  }
}

/**
 * Flags for a worker that must start each task's agent afresh (no pre-started child), for a test that
 * preloads code into the agents it starts: a warm child is started as `worker --warm-child`, so a
 * preload that looks for `run --uuid` in its argv would never see it. Passed unconditionally (the
 * worker has had --no-prestart since its warm child): guessing from the bundle's text broke once
 * the worker command moved into a shared chunk (bundle/cli.js no longer names the flag).
 */
export function coldStartFlags(): string[] {
  return ['--no-prestart']
}

/** The pids of `pid`'s children, as this machine sees them. */
export function childrenOf(pid: number | undefined): number[] {
  if (pid === undefined || pid <= 0) return []
  return spawnSync('ps', ['-o', 'pid=', '--ppid', String(pid)])
    .stdout.toString()
    .trim()
    .split(/\s+/)
    .map(Number)
    .filter((p) => p > 0)
}

/** Kills `pid` at the end of the test if it still lives (an agent a test left orphaned). */
export function killAtEnd(pid: number): void {
  onTestFinished(() => {
    try {
      process.kill(pid, 'SIGKILL')
    } catch {
      // gone
    }
  })
}

export interface Host {
  unshare: ChildProcess
  err: () => string
  /** The worker's pid as this machine sees it (PID 1 of its namespace). */
  workerPid: () => number
}

/** A worker on a simulated host `name` (see canUnshare). */
export function onHost(s: RunSetup, url: string, name: string, args: string[] = []): Host {
  const child = spawn(
    'unshare',
    [
      '--uts',
      '--pid',
      '--fork',
      '--mount-proc',
      'sh',
      '-c',
      'hostname "$0" && exec "$@"',
      name,
      process.execPath,
      BIN,
      'worker',
      '--home',
      s.tree.base,
      '--config',
      s.config,
      ...args,
    ],
    {
      env: { ...process.env, CTXAGENT_DATABASE_URL: url, CTXAGENT_HOME: '', CTXAGENT_CONFIG: '', NO_COLOR: '1' },
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  )
  let err = ''
  child.stderr?.on('data', (d: Buffer) => (err += d.toString()))
  const workerPid = () => childrenOf(child.pid)[0] ?? 0
  onTestFinished(() => {
    if (child.exitCode === null && child.signalCode === null) {
      const pid = workerPid()
      if (pid > 0) process.kill(pid, 'SIGKILL')
    }
  })
  return { unshare: child, err: () => err, workerPid }
}
