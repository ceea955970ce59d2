import { locateTask } from '../../storage/fs/layout.js'
import { appendInbox } from '../../storage/task/inbox.js'
import { signalGroup } from './agent-launcher.js'
import type { Running } from './job-child.js'
import type { JobQueue } from '../queue/job-queue.js'
import { stateText } from '../queue/task-outcome.js'
import type { WorkerOptions } from './worker-options.js'

/** What delivering cancels needs of its worker: its slots, and the queue that says which of its claims an operator cancelled. */
export interface CancelHost {
  options: WorkerOptions
  queue: JobQueue
  running: Map<string, Running>
}

/**
 * A job cancelled while its agent starts or runs (docs/fleet.md#cancelling-a-job): its task,
 * once in running/, gets the pause request `jobs cancel` writes; an agent that has not taken
 * its task yet is sent SIGTERM, and pauses the task at its first check, before any LLM request.
 */
export async function deliverCancels(host: CancelHost): Promise<void> {
  if (![...host.running.values()].some((e) => (e.child !== null || e.clone !== undefined) && e.cancelAsked !== true)) return
  const claims = await host.queue.cancelledClaims(host.options.record.id).catch(() => [])
  for (const claim of claims) {
    const entry = host.running.get(`${claim.id}:${claim.attempts}`)
    if (entry === undefined || entry.cancelAsked === true) continue
    if (entry.child === null) {
      // Cloning: the clone is stopped, and the job ends cancelled (prepareJob).
      if (entry.clone !== undefined) {
        entry.cancelAsked = true
        entry.clone.abort()
        host.options.log(`job ${claim.id}: cancelled during its clone; the clone is stopped`)
      }
      continue
    }
    entry.cancelAsked = true
    const uuid = entry.job.task_uuid
    const where = locateTask(host.options.layout, uuid)
    if (where?.location === 'running') {
      try {
        appendInbox(where.dir, { kind: 'control', action: 'pause', sender: 'jobs cancel' })
        host.options.log(`job ${claim.id}: cancelled; its task ${uuid} is asked to pause`)
      } catch (err) {
        host.options.log(`job ${claim.id}: cancelled; the pause request was not written (${(err as Error).message})`)
      }
    } else if (
      where === null ||
      (where.location === 'paused' && entry.pausedState !== undefined && stateText(host.options.layout, uuid) === entry.pausedState)
    ) {
      signalGroup(entry.child, 'SIGTERM')
      host.options.log(`job ${claim.id}: cancelled as its agent starts; it pauses task ${uuid} before its first turn`)
    }
  }
}
