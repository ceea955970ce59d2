import type { TaskMetadata } from '../storage/task/metadata.js'

/**
 * Where a finished task on a pull/merge request delivers (docs/delivery.md#the-review-loop):
 * the workspace has the request's head branch checked out, so its change is one more
 * commit pushed to that branch — no new branch, no second pull request.
 */
export interface PrHeadTarget {
  kind: 'pr-head'
  branch: string
  pr: { number: number; url: string }
}

/** The pr-head target of a task that works on a pull request's head branch (metadata.run.pr_head), or null. */
export function prHeadTarget(metadata: Pick<TaskMetadata, 'run'>): PrHeadTarget | null {
  const head = metadata.run?.pr_head
  if (head === undefined || head === null) return null
  if (typeof head.branch !== 'string' || head.branch === '' || !Number.isSafeInteger(head.number) || head.number < 1 || typeof head.url !== 'string')
    return null
  return { kind: 'pr-head', branch: head.branch, pr: { number: head.number, url: head.url } }
}
