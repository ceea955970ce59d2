import type { Config } from '../config/schema.js'
import { deliver } from '../delivery/deliver.js'
import { deliveryBase } from '../delivery/base.js'
import { prHeadTarget } from '../sources/pr-head.js'
import type { RunRecord } from '../storage/task/metadata.js'
import type { TaskHandle } from '../storage/task/handle.js'
import type { Delivery } from '../storage/task/state.js'
import type { RunLog } from './log.js'
import type { RunSettings } from './settings.js'

/**
 * What a new task records for its delivery (docs/delivery.md#the-base): the mode, and the
 * commit, branch and origin it starts from, read before the agent runs. A workspace that
 * cannot be delivered from is refused here, before the task exists.
 */
export async function deliveryRecord(settings: RunSettings): Promise<Partial<RunRecord>> {
  if (settings.deliver === 'none') return {}
  const base = await deliveryBase(settings.workspace, settings.deliver)
  return { deliver: settings.deliver, ...base, ...(settings.deliverTarget ? { deliver_target: settings.deliverTarget } : {}) }
}

/**
 * Delivers a task that completed with the model's answer (not a blocked finish), once:
 * a task whose state.json already holds its delivery (a resume after a crash past it)
 * does not deliver again; one killed during it delivers again, and delivery finds its
 * own branch and PR. Written to state.json when it ends.
 */
export async function deliverCompleted(
  handle: TaskHandle,
  config: Config,
  log: RunLog,
  answer: string,
  finishStatus: 'done' | 'blocked' | null,
): Promise<Delivery | null> {
  const record = handle.metadata.run
  if (record?.deliver === undefined || record.deliver === 'none' || typeof record.base_commit !== 'string') return null
  if (handle.state.delivery !== undefined) return handle.state.delivery
  if (finishStatus === 'blocked') return null
  log.info(`delivering the change (${record.deliver === 'pr' ? 'branch and pull request' : 'branch'})`)
  const delivery =
    record.base_git === undefined
      ? unrecorded(record.deliver)
      : await deliver({
          config,
          mode: record.deliver,
          repository: record.base_git,
          base: { commit: record.base_commit, branch: record.base_branch ?? null, remote: record.base_remote ?? null },
          made: handle.state.delivery_commit ?? null,
          remember: async (commit) => {
            await handle.update({ delivery_commit: commit })
          },
          // A task on a pull request's head branch (the review loop's follow-up) pushes one more commit there.
          target: record.deliver_target ?? prHeadTarget(handle.metadata) ?? { kind: 'new-branch' },
          uuid: handle.uuid,
          key: handle.metadata.task_key,
          answer,
        })
  await handle.update({ delivery })
  if (delivery.refused !== null) log.warn(`delivery: ${delivery.refused}`)
  else
    log.info(
      `delivered: branch ${delivery.branch} (commit ${delivery.commit?.slice(0, 12)})${delivery.pushed ? ', pushed' : ''}${delivery.pr ? `, ${delivery.pr.url}` : ''}`,
    )
  return delivery
}

/** A task started before its repository was recorded at start (docs/delivery.md#the-repository): not delivered from whatever `.git` names now. */
function unrecorded(mode: 'branch' | 'pr'): Delivery {
  return {
    mode,
    branch: null,
    commit: null,
    pushed: false,
    pr: null,
    refused: "the task started before ctxagent recorded its repository at start: not delivered (commit the workspace's change by hand)",
  }
}

/** The outcome comment's line about the delivery. */
export function deliveryText(delivery: Delivery | null | undefined): string {
  if (delivery === null || delivery === undefined) return ''
  if (delivery.pr !== null && delivery.refused === null) return `Pull request: ${delivery.pr.url}`
  if (delivery.refused !== null) return `Not delivered: ${delivery.refused}`
  return `Committed on branch \`${delivery.branch}\` (${delivery.commit?.slice(0, 12)})${delivery.pushed ? ', pushed' : ''}.`
}
