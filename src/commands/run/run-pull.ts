import type { CommandEnv } from '../../command-env.js'
import { notTheTaskRepository } from '../../delivery/push.js'
import { checkoutPrHead } from '../../workspace/pr-workspace.js'
import { recordsDelivery } from '../../run/inheritance.js'
import { refuseTreeInWorkspace } from '../../run/settings.js'
import type { RunSettings } from '../../run/settings.js'
import type { RemoteTask } from '../../sources/types.js'
import { giveWorkspace, sandboxIdentity } from '../../tools/sandbox/identity.js'
import { cloneCredentials } from '../../workspace/clone.js'

/**
 * A task on a pull/merge request works on its head branch (docs/delivery.md#the-review-loop):
 * `settings` get the workspace that has it checked out and the pull request (recorded as
 * metadata.run.pr_head, where delivery finds it). Returns the task that opened it, when
 * the marker in its body is believed: the bot's account wrote the body, or this tree's
 * task of that uuid recorded delivering it.
 */
export async function placeOnPull(
  ctx: CommandEnv,
  config: CommandEnv['config'],
  settings: RunSettings,
  task: RemoteTask,
  uuid: string | undefined,
): Promise<string | null> {
  const pull = task.pull
  if (pull === undefined) return null
  const placed = await checkoutPrHead({
    workspace: settings.workspace,
    uuid: uuid ?? '',
    workspacesDir: config.fleet.workspaces_dir,
    head: pull.head,
    forge: task.key.task_source,
    credentials: cloneCredentials(config),
    notOurs: (url) => notTheTaskRepository(config, task.key, url),
  })
  if (placed.note !== null) ctx.io.warn(placed.note)
  if (placed.checkedOut) {
    refuseTreeInWorkspace(placed.workspace, ctx.layout.base)
    // As root, what git checked out is root's: given to the user the task's commands run as (the workspace's owner, or nobody).
    giveWorkspace(placed.workspace, sandboxIdentity(config.tools, settings.workspace))
    settings.workspace = placed.workspace
    settings.prHead = pull.head
  } else {
    settings.prHead = null
  }
  if (pull.opener === null) return null
  return pull.byBot || recordsDelivery(ctx.layout, pull.opener, pull.head) ? pull.opener : null
}
