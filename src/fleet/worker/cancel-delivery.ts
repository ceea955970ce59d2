import { locateTask } from '../../storage/fs/layout.js'
import { appendInbox } from '../../storage/task/inbox.js'
import { signalGroup } from './agent-launcher.js'
import type { JobContext } from './job-context.js'
import { stateText } from '../queue/task-outcome.js'

/**
 * A job cancelled while its agent starts or runs (docs/fleet.md#cancelling-a-job): its task,
 * once in running/, gets the pause request `jobs cancel` writes; an agent that has not taken
 * its task yet is sent SIGTERM, and pauses the task at its first check, before any LLM request.
 */
export async function deliverCancels(ctx: Pick<JobContext, 'options' | 'queue' | 'slots'>): Promise<void> {
  const { options, queue, slots } = ctx
  if (![...slots.values()].some((e) => (e.child !== null || e.clone !== undefined) && e.cancelAsked !== true)) return
  const claims = await queue.cancelledClaims(options.record.id).catch(() => [])
  for (const claim of claims) {
    const entry = slots.get(`${claim.id}:${claim.attempts}`)
    if (entry === undefined || entry.cancelAsked === true) continue
    if (entry.child === null) {
      // Cloning: the clone is stopped, and the job ends cancelled (prepareJob).
      if (entry.clone !== undefined) {
        entry.cancelAsked = true
        entry.clone.abort()
        options.log(`job ${claim.id}: cancelled during its clone; the clone is stopped`)
      }
      continue
    }
    entry.cancelAsked = true
    const uuid = entry.job.task_uuid
    const where = locateTask(options.layout, uuid)
    if (where?.location === 'running') {
      try {
        appendInbox(where.dir, { kind: 'control', action: 'pause', sender: 'jobs cancel' })
        options.log(`job ${claim.id}: cancelled; its task ${uuid} is asked to pause`)
      } catch (err) {
        options.log(`job ${claim.id}: cancelled; the pause request was not written (${(err as Error).message})`)
      }
    } else if (where === null || (where.location === 'paused' && entry.pausedState !== undefined && stateText(options.layout, uuid) === entry.pausedState)) {
      signalGroup(entry.child, 'SIGTERM')
      options.log(`job ${claim.id}: cancelled as its agent starts; it pauses task ${uuid} before its first turn`)
    }
  }
}
