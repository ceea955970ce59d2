import type { ChildProcess } from 'node:child_process'
import { signalGroup } from './agent-launcher.js'
import type { Job } from '../queue/job.js'
import { stateText } from '../queue/task-outcome.js'
import type { ChildEnd } from '../queue/task-outcome.js'
import { claimKey } from './job-context.js'
import type { JobContext, Running } from './job-context.js'
import type { Start } from './job-prepare.js'
import { problemIn } from './worker-log.js'
import type { WorkerOptions } from './worker-options.js'

/** How a job's child ended, and, for a resume, its paused task's state.json as it was before (unchanged after: the agent never began). */
export interface ChildExit extends ChildEnd {
  pausedState: string | null
}

/** Where a child's stderr goes: the worker's relay (`--log-format json`), or this process's stderr as it comes. */
export function relayOf(options: WorkerOptions, child: ChildProcess): (chunk: Buffer) => void {
  return options.relay?.(child.pid) ?? ((chunk) => void process.stderr.write(chunk))
}

/**
 * Runs a job's task in a child process of its own (`start.args`, as `run` takes them), in the slot
 * its preparation took, until it closes: the task on its stdin, its stderr relayed (the last problem
 * it reported kept, to explain its end). Resolves with how it ended, its slot freed.
 */
export function runChild(ctx: Pick<JobContext, 'options' | 'launcher' | 'slots'>, job: Job, start: Start): Promise<ChildExit> {
  const { options, launcher, slots } = ctx
  const pausedState = start.resume ? stateText(options.layout, job.task_uuid) : null
  const child = launcher.launch([...start.args, '--log-format', 'json'])
  // A fresh entry (a cancel passed on during the clone is not this child's); a stop already asked of the slot holds.
  const stopped = slots.get(claimKey(job))?.stopped === true
  const entry: Running = { job, child, stopped, lastLine: '', ...(start.resume ? { pausedState } : {}) }
  slots.set(claimKey(job), entry)
  if (stopped) signalGroup(child, 'SIGTERM')
  launcher.prestart()
  options.log(`job ${job.id}: ${start.resume ? 'resuming' : 'starting'} task ${job.task_uuid} (pid ${child.pid})`)
  child.stdin?.on('error', () => undefined)
  child.stdin?.end(start.resume ? '' : (job.spec.task ?? ''))
  const relay = relayOf(options, child)
  child.stderr?.on('data', (chunk: Buffer) => {
    relay(chunk)
    // What explains an end is the last problem it reported, not its last progress line.
    for (const line of chunk.toString().split('\n')) entry.lastLine = problemIn(line) ?? entry.lastLine
  })
  child.on('error', (err) => (entry.lastLine = err.message))
  return new Promise((resolve) => {
    child.on('close', (code, signal) => {
      slots.delete(claimKey(job))
      launcher.prestart()
      resolve({ code, signal, stopped: entry.stopped, lastLine: entry.lastLine, pausedState })
    })
  })
}
