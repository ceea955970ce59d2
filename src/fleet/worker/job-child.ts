import type { ChildProcess } from 'node:child_process'
import type { AgentLauncher } from './agent-launcher.js'
import type { Job } from '../queue/job.js'
import { closeVerdict, stateText, taskSnapshot } from '../queue/task-outcome.js'
import type { CloseVerdict } from '../queue/task-outcome.js'
import { problemIn } from './worker-log.js'
import type { WorkerOptions } from './worker-options.js'

/** A job holding one of a worker's slots: from its claim (cloning, its child not started yet) to its child's close. */
export interface Running {
  job: Job
  /** Null while its workspace is being cloned. */
  child: ChildProcess | null
  /** This worker asked the task to stop (it pauses): its resume goes back to the queue. */
  stopped: boolean
  lastLine: string
  /** A resume: its paused task's state.json as it was before the agent took it. */
  pausedState?: string | null
  /** Its job's cancel was passed on to the agent (deliverCancels). */
  cancelAsked?: boolean
  /** Stops its `--repo` clone while one is made. */
  clone?: AbortController
}

/** A slot's key: the job and its attempt (a job a pass handed back may be claimed again while its first child still ends). */
export function claimKey(job: Job): string {
  return `${job.id}:${job.attempts}`
}

/** Where a child's stderr goes: the worker's relay (`--log-format json`), or this process's stderr as it comes. */
export function relayOf(options: WorkerOptions, child: ChildProcess): (chunk: Buffer) => void {
  return options.relay?.(child.pid) ?? ((chunk) => void process.stderr.write(chunk))
}

/** What a job's child needs of its worker: the slots it holds one of, and the launcher that starts it. */
export interface ChildHost {
  options: WorkerOptions
  launcher: AgentLauncher
  running: Map<string, Running>
}

/**
 * Runs a job's task in a child process of its own (`args`, as `run` takes them), in a slot
 * from its start to its close: the task on its stdin, its stderr relayed (the last problem it
 * reported kept, to explain its end), and, once it closes, what the job becomes (closeVerdict)
 * handed to `closed`.
 */
export function spawnJobChild(host: ChildHost, job: Job, args: string[], resume: boolean, closed: (verdict: CloseVerdict) => void): void {
  // What the paused task's state.json says before its agent takes it: unchanged after, the agent never began.
  const pausedState = resume ? stateText(host.options.layout, job.task_uuid) : null
  const child = host.launcher.launch([...args, '--log-format', 'json'])
  const entry: Running = { job, child, stopped: false, lastLine: '', ...(resume ? { pausedState } : {}) }
  host.running.set(claimKey(job), entry)
  host.launcher.prestart()
  host.options.log(`job ${job.id}: ${resume ? 'resuming' : 'starting'} task ${job.task_uuid} (pid ${child.pid})`)
  child.stdin?.on('error', () => undefined)
  child.stdin?.end(resume ? '' : (job.spec.task ?? ''))
  const relay = relayOf(host.options, child)
  child.stderr?.on('data', (chunk: Buffer) => {
    relay(chunk)
    // What explains an end is the last problem it reported, not its last progress line.
    for (const line of chunk.toString().split('\n')) entry.lastLine = problemIn(line) ?? entry.lastLine
  })
  child.on('error', (err) => (entry.lastLine = err.message))
  child.on('close', (code, signal) => {
    host.running.delete(claimKey(job))
    host.launcher.prestart()
    const task = taskSnapshot(host.options.layout, job.task_uuid, pausedState)
    const verdict = closeVerdict(job, resume, { code, signal, stopped: entry.stopped, lastLine: entry.lastLine }, task, {
      maxAttempts: host.options.maxAttempts ?? 3,
      retry: host.options.retry,
    })
    closed(verdict)
  })
}
