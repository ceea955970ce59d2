import type { Config } from '../config/schema.js'
import type { Layout } from '../storage/fs/layout.js'
import { locateTask } from '../storage/fs/layout.js'
import { readState } from '../storage/task/state.js'
import { planSandbox } from '../tools/sandbox.js'
import { repositoryOfUrl } from '../workspace/environment/definition.js'
import { recordedImage } from '../workspace/environment/image.js'
import { prepareEnvironment } from '../workspace/environment/prepare.js'
import { trustedBase } from '../workspace/trusted-base.js'
import type { EvalTask } from './task.js'
import { isUrl } from './task.js'

// The repository's environment around an eval's check (docs/eval.md#checking-a-suite, docs/eval.md#a-trial): what a trial's task has, the check has.

/** Where a check runs: in the environment's image root, or on the host's system (null); or why the environment could not be made ready. */
export type CheckRoot = { ok: true; root: string | null } | { ok: false; why: string }

/**
 * The task's repository as its trial's task and `eval check` match the operator's `environments`
 * by it (docs/eval.md#a-trial), as a `run` on that repository would be matched: a URL by its
 * owner/repo (its last two steps, as the origin of a clone of it is read), a local repository by
 * its path (as a workspace there: its origin's owner/repo, its real path, its path). Without it
 * the fresh starting tree, a repository of its own, would match no entry.
 */
export function taskRepository(task: EvalTask): string | null {
  return isUrl(task.repo) ? repositoryOfUrl(task.repo) : task.repo
}

/**
 * `eval check`'s starting tree made ready as a trial's task makes it before its agent
 * starts (docs/environments.md): the environment read from the starting commit (the one
 * commit ctxagent made of the task's start, trusted as the base: nothing else has written
 * there yet) with the operator's entry for the task's repository over it, setup's result from
 * the cache at `store` (or setup run once for its key), maintenance run. `hidden`: what no
 * script may see (the suite among them); `signal`: the stop, which ends setup at once.
 */
export async function prepareStart(
  config: Config,
  task: EvalTask,
  workspace: string,
  hidden: readonly string[],
  store: string,
  signal: AbortSignal,
): Promise<CheckRoot> {
  const base = await trustedBase(workspace)
  const repository = taskRepository(task)
  const prepared = await prepareEnvironment({ config, workspace, repository, hidden, log: null, store, base, signal })
  if (prepared.kind === 'none') return { ok: true, root: null }
  if (prepared.kind === 'ready') return { ok: true, root: prepared.root }
  const tail = prepared.record.tail?.trim().split('\n').pop()?.slice(0, 200) ?? ''
  return { ok: false, why: `its environment could not be prepared: ${prepared.record.error ?? prepared.kind}${tail === '' ? '' : ` (${tail})`}` }
}

/**
 * The image a trial's task ran its agent's commands in (state.json `environment.image`,
 * written by ctxagent in the task tree the agent never sees), the same digest, for its
 * check; none recorded: the host's system.
 */
export async function trialRoot(layout: Layout, uuid: string, config: Config, hidden: readonly string[], workspace: string, store: string): Promise<CheckRoot> {
  const ref = locateTask(layout, uuid)
  const image = ref === null ? undefined : readState(ref.dir)?.environment?.image
  if (image === undefined) return { ok: true, root: null }
  const planned = planSandbox(config.tools, hidden, workspace)
  const identity = planned.ok && planned.plan.kind === 'bwrap' && process.getuid?.() === 0 ? planned.plan.identity : null
  const got = await recordedImage(image, { store, identity, hidden, workspace })
  return got.ok ? { ok: true, root: got.root } : { ok: false, why: `its task's image: ${got.error}` }
}
