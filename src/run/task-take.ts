import { join } from 'node:path'
import type { Config } from '../config/schema.js'
import { resumeRaceLost } from '../errors.js'
import { FILES } from '../storage/fs/layout.js'
import type { TaskRef } from '../storage/fs/layout.js'
import type { TaskEnv } from '../storage/task/env.js'
import type { TaskHandle } from '../storage/task/handle.js'
import { createTask, resumeTask } from '../storage/task/lifecycle.js'
import type { TaskKey } from '../storage/task/metadata.js'
import { fileSize } from '../storage/task/reader.js'
import type { RunRecord } from '../storage/task/metadata.js'
import { findInheritance, inheritanceOf } from './inheritance.js'
import type { Inheritance } from './inheritance.js'
import type { RunStart } from './run-start.js'
import { runRecord } from './settings.js'
import type { RunSettings } from './settings.js'

// Taking a task for this process: a new one created (with the earlier task it inherits from), or a paused one moved back to running/.

/** The earlier task a new one inherits from: the last with its key, else the task that opened its pull request (docs/delivery.md#the-review-loop). */
export async function inheritanceFor(env: TaskEnv, settings: RunSettings, start: RunStart): Promise<Inheritance | null> {
  if (start.kind !== 'new' || !settings.inherit) return null
  const found = await findInheritance(env, keyColumns(start.source.key, start.user), start.source.key.task_source === 'local' ? settings.workspace : null)
  if (found === null && start.source.opener !== undefined)
    return inheritanceOf(env, start.source.opener, {
      key: start.source.key,
      user: start.user,
      // The pull request the task is on: its checked-out head, else its key (a workspace that could not check it out).
      pr: settings.prHead ?? pullOf(start.source.key),
      acrossUsers: env.config.context.inheritance.across_users,
    })
  return found
}

/** A pull/merge request's number from a task key (no URL: the repository is then judged by the key alone). */
function pullOf(key: TaskKey): { number: number; url: string } | null {
  if ((key.task_type !== 'pull_request' && key.task_type !== 'merge_request') || !/^\d+$/.test(key.task_id)) return null
  return { number: Number(key.task_id), url: '' }
}

/** Where the inbox ends before this run takes the task: a pause request after it (a `jobs cancel` while a fleet's agent starts) is this run's. */
export function inboxEnd(start: RunStart): number {
  return start.kind === 'new' ? 0 : (fileSize(join(start.ref.dir, FILES.inbox)) ?? 0)
}

/** What a new task is created with, and what to do when the task is taken over. */
export interface Taking {
  config: Config
  settings: RunSettings
  /** What delivery starts from (docs/delivery.md), recorded with the run's settings. */
  delivering: Partial<RunRecord>
  inheritance: Inheritance | null
  onLost: () => void
}

/** Creates the new task, or takes the paused (or continuable) one into running/. */
export async function takeTask(env: TaskEnv, start: RunStart, taking: Taking): Promise<TaskHandle> {
  const { config, settings, delivering, inheritance, onLost } = taking
  if (start.kind === 'new') {
    return createTask(
      env,
      { task_key: start.source.key, user: start.user, run: { ...runRecord(settings, config), ...delivering }, inherited_from: inheritance?.uuid ?? null },
      { onLost, ...(start.uuid !== undefined ? { uuid: start.uuid } : {}) },
    )
  }
  return resumeTask(env, start.ref, { onLost, continueTimeout: start.ref.location === 'completed' }).catch((err: unknown) => {
    throw takenWhileResuming(err, start.ref)
  })
}

/**
 * Two processes resuming one paused task: the winner moves it to running/, and the
 * loser's link() or rename() then finds its directory gone (ENOENT) or taken
 * (EEXIST, ENOTEMPTY). That is a lost race, not a failure: one line, exit 4.
 */
function takenWhileResuming(err: unknown, ref: TaskRef): unknown {
  const code = (err as NodeJS.ErrnoException | null)?.code
  if (code !== 'ENOENT' && code !== 'EEXIST' && code !== 'ENOTEMPTY') return err
  return resumeRaceLost(ref.uuid)
}

function keyColumns(key: TaskKey, user: string) {
  const repository = key.owner && key.repo ? `${key.owner}/${key.repo}` : key.repo || key.owner || ''
  return { task_type: `${key.task_source}_${key.task_type}`, task_identifier: key.task_id || null, repository: repository || null, user }
}
