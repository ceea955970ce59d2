import type { Config } from '../config/schema.js'
import type { TaskKey } from '../storage/task/metadata.js'
import type { RunLog } from './log.js'
import type { Outcome } from './outcome.js'
import type { RunSettings } from './settings.js'

type IssueStatus = keyof Config['poll']['labels']

/**
 * Whether this run moves its issue's status labels (docs/delivery.md#one-pull-request-per-issue):
 * an issue delivered as a pull request by `run --github|--gitlab` by hand. A fleet's job
 * leaves them to the poller that queued it, which moves them by the job's state.
 */
export function movesLabels(settings: RunSettings, key: TaskKey, fleetJob: boolean): boolean {
  return !fleetJob && settings.deliver === 'pr' && key.task_type === 'issue' && (key.task_source === 'github' || key.task_source === 'gitlab')
}

/**
 * The status label an outcome puts on, as `poll` has it for a job's (null: the task is not this run's any more).
 * A completed task whose delivery was refused or failed is not done: someone must look (docs/delivery.md#one-pull-request-per-issue).
 */
export function issueStatus(outcome: Pick<Outcome, 'status' | 'delivery_result'>): IssueStatus | null {
  const { status } = outcome
  if (status === 'completed') return outcome.delivery_result === 'refused' || outcome.delivery_result === 'failed' ? 'failed' : 'done'
  if (status === 'paused') return 'paused'
  if (status === 'lost') return null
  return 'failed'
}

/**
 * Puts `poll.labels[status]` on the issue and takes the other status labels off, as `poll`
 * does for its jobs: while one is on, a poller watching the repository does not queue the
 * issue again. A label the forge does not take is a warning; the task goes on.
 */
export async function labelIssue(config: Config, key: TaskKey, status: IssueStatus, log: RunLog): Promise<void> {
  const labels = config.poll.labels
  const add = labels[status]
  const remove = Object.values(labels).filter((l) => l !== add)
  const repository = `${key.owner}/${key.repo}`
  try {
    const tracker =
      key.task_source === 'github'
        ? (await import('../sources/github.js')).githubTracker(config, repository)
        : (await import('../sources/gitlab.js')).gitlabTracker(config, repository)
    await tracker.relabel(`${repository}#${key.task_id}`, add, remove)
  } catch (err) {
    log.warn(`the issue's label ${add} was not set (${(err as Error).message})`)
  }
}
