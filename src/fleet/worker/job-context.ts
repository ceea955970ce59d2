import type { ChildProcess } from 'node:child_process'
import type { AgentLauncher } from './agent-launcher.js'
import type { Job } from '../queue/job.js'
import type { JobQueue } from '../queue/job-queue.js'
import type { WorkerOptions } from './worker-options.js'

/**
 * What a job's steps are given of their worker (job-life.ts): its options, its queue, its
 * launcher, its slots and its stop. Values, never closures into the worker: each step returns
 * what the next one takes.
 */
export interface JobContext {
  options: WorkerOptions
  queue: JobQueue
  launcher: AgentLauncher
  /** The worker's slots by claim (claimKey): a job holds one from its claim to its child's close. */
  slots: Map<string, Running>
  /** Aborted when the worker stops: a wait ends early, and a settlement the database refuses is left to watch-locks. */
  stop: AbortSignal
}

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
