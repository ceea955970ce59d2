import { lchownSync, lstatSync, readdirSync, statSync } from 'node:fs'
import { join } from 'node:path'
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
    // And what it wrote into the operator's repository (the worktree's records, refs, objects) goes back to that repository's
    // owner: delivery commits there as that user (docs/delivery.md#the-review-loop), and the operator's git keeps working.
    if (placed.gitDir !== null) giveBackRootFiles(placed.gitDir)
    settings.workspace = placed.workspace
    settings.prHead = pull.head
  } else {
    settings.prHead = null
  }
  if (pull.opener === null) return null
  return pull.byBot || recordsDelivery(ctx.layout, pull.opener, pull.head) ? pull.opener : null
}

/** As root, gives what root owns under a repository's git directory to that directory's owner (nothing when it is root's itself). */
function giveBackRootFiles(gitDir: string): void {
  if (process.getuid?.() !== 0) return
  const { uid, gid } = statSync(gitDir)
  if (uid === 0) return
  const walk = (p: string): void => {
    const st = lstatSync(p)
    // lchown: a link is given itself, never followed out of the repository; a file of more than one name may be
    // another file's (a hard link an agent made to one of root's), and what git wrote here has one.
    if (st.uid === 0 && (st.isDirectory() || st.nlink === 1)) lchownSync(p, uid, gid)
    if (st.isDirectory()) for (const name of readdirSync(p)) walk(join(p, name))
  }
  walk(gitDir)
}
