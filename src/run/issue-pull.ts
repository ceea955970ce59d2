import type { Config } from '../config/schema.js'
import type { OwnPull, ReviewWatch } from '../sources/types.js'
import type { Layout } from '../storage/fs/layout.js'
import { locateTask } from '../storage/fs/layout.js'
import { readMetadata } from '../storage/task/metadata.js'
import type { TaskKey } from '../storage/task/metadata.js'
import { recordsDelivery } from './inheritance.js'

/**
 * The open pull/merge request of ctxagent's that already carries an issue's work, or null
 * (docs/delivery.md#one-pull-request-per-issue): one whose marker names a task of this tree
 * on that very issue, believed as the review loop believes it (the bot's account wrote the
 * body, or that task recorded delivering that pull request). A marker alone, pasted into
 * anyone's body, makes nothing ctxagent's. `except`: the asking task's own (a crash's resume
 * finds its PR by branch and marker instead). Of several (made before this rule), the first.
 */
export async function openPullOfIssue(config: Config, layout: Layout, key: TaskKey, except: string | null = null): Promise<OwnPull | null> {
  if (key.task_type !== 'issue' || key.owner === null || !/^\d+$/.test(key.task_id)) return null
  const watch = await watchOf(config, key)
  if (watch === null) return null
  const own = (await watch.listOwnPulls()).filter(
    (p) => p.opener !== except && (p.byBot || recordsDelivery(layout, p.opener, p)) && openedFor(layout, p.opener, key),
  )
  return own.sort((a, b) => a.number - b.number)[0] ?? null
}

async function watchOf(config: Config, key: TaskKey): Promise<ReviewWatch | null> {
  const where = `${key.owner}/${key.repo}`
  if (key.task_source === 'github') return (await import('../sources/github-review.js')).githubReviewWatch(config, where)
  if (key.task_source === 'gitlab') return (await import('../sources/gitlab-review.js')).gitlabReviewWatch(config, where)
  return null
}

/** Whether the task `uuid` of this tree is one on the same issue of the same repository. */
function openedFor(layout: Layout, uuid: string, key: TaskKey): boolean {
  const task = locateTask(layout, uuid)
  if (task === null) return false
  try {
    const theirs = readMetadata(task.dir).task_key
    const same = (a: string | null, b: string | null) => (a ?? '').toLowerCase() === (b ?? '').toLowerCase()
    return (
      theirs.task_source === key.task_source &&
      same(theirs.owner, key.owner) &&
      same(theirs.repo, key.repo) &&
      theirs.task_type === 'issue' &&
      theirs.task_id === key.task_id
    )
  } catch {
    return false
  }
}
