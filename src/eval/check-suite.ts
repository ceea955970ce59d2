import { chmodSync, mkdtempSync, rmSync } from 'node:fs'
import { join } from 'node:path'
import type { Config } from '../config/schema.js'
import { prepareStart } from './environment.js'
import { applySolution, judge } from './judge.js'
import type { EvalTask } from './suite.js'
import { startingTree } from './workspace.js'

/** `eval check`'s verdict on one task: usable, or why not (docs/eval.md#checking-a-suite). */
export type TaskVerdict = { task: string; ok: true; solution: boolean } | { task: string; ok: false; why: string }

/** Where `eval check` works: scratch workspaces, mirrors of URL repositories, what no command sees, the environments' cache. */
export interface CheckPlaces {
  scratch: string
  mirrors: string
  /** Places no command may see (the task tree, the config, the suite). */
  hidden: readonly string[]
  /** The environments' cache (environmentStore), the one the trials' tasks use. */
  store: string
  /** The command's stop: setup, solve.sh and the check are ended at once, and the task gets no verdict (docs/eval.md#a-stop). */
  signal: AbortSignal
}

/** A task's attempt ended by the stop: no verdict on it. */
const STOPPED = Symbol('stopped')

/**
 * A task is usable when its check fails on the starting tree (else it measures nothing)
 * and, when it has a reference solution, passes with it applied (else the check or the
 * task is wrong). Each in a scratch workspace under `scratch`, made ready by the
 * repository's environment as a trial's task is, the check in the sandbox (in the
 * environment's image when it has one). null: the stop ended it, no verdict.
 */
export async function checkTask(task: EvalTask, config: Config, places: CheckPlaces): Promise<TaskVerdict | null> {
  const before = await attempt(task, config, places, false)
  if (before === STOPPED) return null
  if (typeof before === 'string') return { task: task.name, ok: false, why: before }
  if (before === true) return { task: task.name, ok: false, why: 'its check passes on the starting tree: it measures nothing' }
  if (task.solution === null) return { task: task.name, ok: true, solution: false }
  const after = await attempt(task, config, places, true)
  if (after === STOPPED) return null
  if (typeof after === 'string') return { task: task.name, ok: false, why: after }
  if (after !== true)
    return {
      task: task.name,
      ok: false,
      why: `its check fails with ${task.solution.kind === 'patch' ? 'solution.patch applied' : 'solution/solve.sh run'} (${after.last}): the check or the solution is wrong`,
    }
  return { task: task.name, ok: true, solution: true }
}

/** true: the check passed; else its output's last line; or a string: why it could not be run; STOPPED: the stop ended it. */
async function attempt(task: EvalTask, config: Config, places: CheckPlaces, solved: boolean): Promise<true | { last: string } | string | typeof STOPPED> {
  const { hidden, signal } = places
  const dir = mkdtempSync(join(places.scratch, `${task.name}-`))
  // Searchable by the sandbox's user, who runs the check in the workspace below.
  chmodSync(dir, 0o711)
  try {
    const workspace = join(dir, 'workspace')
    try {
      await startingTree(task, workspace, places.mirrors, config)
    } catch (err) {
      return `its starting tree could not be made: ${(err as Error).message}`
    }
    // As a trial's task: its environment ready before anything runs there (the solution stands in for the agent).
    const environment = await prepareStart(config, task, workspace, hidden, places.store, signal)
    if (signal.aborted) return STOPPED
    if (!environment.ok) return environment.why
    const judging = { task, config, workspace, hidden, root: environment.root, signal }
    if (solved) {
      const applied = await applySolution(judging)
      if (typeof applied === 'object' && applied !== null) return STOPPED
      if (applied !== null) return applied
    }
    const check = await judge(judging)
    if (check.stopped) return STOPPED
    if (check.error !== null) return check.error
    if (check.passed) return true
    const last = check.tail.trim().split('\n').pop() ?? ''
    return { last: check.timed_out ? 'it timed out' : `exit ${check.exit_code ?? 'by a signal'}: ${last.slice(0, 200)}` }
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
}
