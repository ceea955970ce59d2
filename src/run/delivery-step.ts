import type { Config } from '../config/schema.js'
import { deliveryBase } from '../delivery/base.js'
import { taskFacts } from '../delivery/pr-body.js'
import { recordRepository } from '../delivery/repository.js'
import type { RepositoryRecord } from '../delivery/repository.js'
import { prHeadTarget } from '../sources/pr-head.js'
import type { Layout } from '../storage/fs/layout.js'
import type { RunRecord, StartsFrom } from '../storage/task/metadata.js'
import type { TaskHandle } from '../storage/task/handle.js'
import type { Delivery } from '../storage/task/state.js'
import { holdForTest } from '../test-pause.js'
import { sandboxIdentity } from '../tools/sandbox/identity.js'
import { removeTaskTree, taskTree } from '../workspace/task-tree.js'
import { openPullOfIssue } from './issue-pull.js'
import type { RunLog } from './log.js'
import type { RunSettings } from './settings.js'

/** What a new task records for its delivery (empty: it does not deliver), and the worktree made for it now, if one was. */
export interface DeliveryStart {
  record: Partial<RunRecord>
  /** Removed (removeTaskTree) when the task then does not start. */
  made: StartsFrom | undefined
}

/**
 * What a new task records for its delivery (docs/delivery.md#the-base): the mode, and the
 * commit, branch and origin it starts from, read before the agent runs; and the tree of its
 * own it works on (docs/delivery.md#what-a-task-starts-from), which becomes the settings'
 * workspace. A workspace that cannot be delivered from is refused here, before the task exists.
 */
export async function deliveryStart(settings: RunSettings, config: Config, uuid: string): Promise<DeliveryStart> {
  if (settings.deliver === 'none') return { record: {}, made: undefined }
  // The checkout's repository is checked here too (its record, base_git, refused if unusable): the worktree is made through it.
  const base = await deliveryBase(settings.workspace, settings.deliver)
  const tree = await taskTree({
    workspace: settings.workspace,
    uuid,
    commit: base.base_commit,
    workspacesDir: config.fleet.workspaces_dir,
    onPullHead: settings.prHead !== undefined && settings.prHead !== null,
    identity: sandboxIdentity(config.tools, settings.workspace),
  })
  // Delivery works through the repository of the tree the agent works in (a worktree's `.git` is a gitfile naming
  // its own git directory, beside the common one), recorded now, before the agent runs (docs/delivery.md#the-repository).
  let repository: RepositoryRecord
  try {
    repository = tree.workspace === settings.workspace ? base.base_git : await recordRepository(tree.workspace)
  } catch (err) {
    if (tree.made) removeTaskTree(tree.startsFrom)
    throw err
  }
  settings.workspace = tree.workspace
  return {
    record: {
      deliver: settings.deliver,
      ...base,
      base_git: repository,
      ...(settings.deliverTarget ? { deliver_target: settings.deliverTarget } : {}),
      workspace: tree.workspace,
      starts_from: tree.startsFrom,
    },
    made: tree.made ? tree.startsFrom : undefined,
  }
}

/**
 * A task's worktree, once nothing in it is wanted any more: its change is committed on the
 * branch (whether or not the push and the PR followed), or it held none. One whose delivery
 * was refused before a commit (a secret, an excluded file) is kept for a person, and
 * removed by `cleanup` with its task (docs/delivery.md#what-a-task-starts-from).
 */
function releaseTree(record: RunRecord, delivery: Delivery, log: RunLog): void {
  const done = delivery.commit !== null || (delivery.refused ?? '').startsWith('no changes')
  if (!done || record.starts_from?.kind !== 'worktree') return
  try {
    if (removeTaskTree(record.starts_from)) log.info(`removed the task's worktree ${record.starts_from.worktree}`)
  } catch (err) {
    log.warn(`the task's worktree ${record.starts_from.worktree} was not removed (${(err as Error).message}); cleanup removes it with the task`)
  }
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
  layout: Layout,
  log: RunLog,
  answer: string,
  finishStatus: 'done' | 'blocked' | null,
): Promise<Delivery | null> {
  const record = handle.metadata.run
  if (record?.deliver === undefined || record.deliver === 'none' || typeof record.base_commit !== 'string') return null
  if (handle.state.delivery !== undefined) {
    // A crash after the delivery was recorded, before its worktree was removed.
    releaseTree(record, handle.state.delivery, log)
    return handle.state.delivery
  }
  if (finishStatus === 'blocked') return null
  log.info(`delivering the change (${record.deliver === 'pr' ? 'branch and pull request' : 'branch'})`)
  await holdForTest('run:delivering')
  // A task on a pull request's head branch (the review loop's follow-up) pushes one more commit there.
  const target = record.deliver_target ?? prHeadTarget(handle.metadata) ?? { kind: 'new-branch' }
  // One PR per issue: another task's, opened while this one ran, leaves this change on its branch, unpushed.
  // (A listing that fails is no reason not to deliver: the forge answers the opening itself.)
  const taken =
    record.deliver === 'pr' && target.kind === 'new-branch'
      ? await openPullOfIssue(config, layout, handle.metadata.task_key, handle.uuid).catch(() => null)
      : null
  // Loaded when a task delivers, not at every run's start: with it come the forges' replies' schemas (classic zod, ~180 KB; docs/development.md#start-up).
  const { deliver } = await import('../delivery/deliver.js')
  let delivery =
    record.base_git === undefined
      ? unrecorded(record.deliver)
      : await deliver({
          config,
          mode: taken === null ? record.deliver : 'branch',
          repository: record.base_git,
          base: { commit: record.base_commit, branch: record.base_branch ?? null, remote: record.base_remote ?? null },
          made: handle.state.delivery_commit ?? null,
          remember: async (commit) => {
            await handle.update({ delivery_commit: commit })
          },
          target,
          uuid: handle.uuid,
          key: handle.metadata.task_key,
          answer,
          facts: record.deliver === 'pr' ? await taskFacts(handle.dir, handle.metadata, handle.state, config, new Date()) : null,
        })
  if (taken !== null)
    delivery = {
      ...delivery,
      mode: 'pr',
      refused:
        delivery.refused ??
        `the issue has ctxagent's open pull request ${taken.url}, opened while this task ran: the change is committed on branch ${delivery.branch}, not pushed, and no second pull request is opened`,
    }
  await handle.update({ delivery })
  if (delivery.refused !== null) log.warn(`delivery: ${delivery.refused}`)
  else
    log.info(
      `delivered: branch ${delivery.branch} (commit ${delivery.commit?.slice(0, 12)})${delivery.pushed ? ', pushed' : ''}${delivery.pr ? `, ${delivery.pr.url}` : ''}`,
    )
  releaseTree(record, delivery, log)
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
  // Bold: the issue's readers must not take a completed task for a delivered change (docs/delivery.md#what-is-recorded).
  if (delivery.refused !== null) return `**Not delivered:** ${delivery.refused.replace(/^not delivered:\s*/, '')}`
  return `Committed on branch \`${delivery.branch}\` (${delivery.commit?.slice(0, 12)})${delivery.pushed ? ', pushed' : ''}.`
}
