import { chmodSync, mkdtempSync, rmSync } from 'node:fs'
import { join } from 'node:path'
import type { Config } from '../config/schema.js'
import { applySolution, judge } from './judge.js'
import type { EvalTask } from './suite.js'
import { startingTree } from './workspace.js'

/** `eval check`'s verdict on one task: usable, or why not (docs/eval.md#checking-a-suite). */
export type TaskVerdict = { task: string; ok: true; solution: boolean } | { task: string; ok: false; why: string }

/**
 * A task is usable when its check fails on the starting tree (else it measures nothing)
 * and, when it has a reference solution, passes with it applied (else the check or the
 * task is wrong). Each in a scratch workspace under `scratch`, the check in the sandbox.
 */
export async function checkTask(task: EvalTask, config: Config, scratch: string, mirrors: string, hidden: readonly string[]): Promise<TaskVerdict> {
  const before = await attempt(task, config, scratch, mirrors, hidden, false)
  if (typeof before === 'string') return { task: task.name, ok: false, why: before }
  if (before === true) return { task: task.name, ok: false, why: 'its check passes on the starting tree: it measures nothing' }
  if (task.solution === null) return { task: task.name, ok: true, solution: false }
  const after = await attempt(task, config, scratch, mirrors, hidden, true)
  if (typeof after === 'string') return { task: task.name, ok: false, why: after }
  if (after !== true)
    return {
      task: task.name,
      ok: false,
      why: `its check fails with ${task.solution.kind === 'patch' ? 'solution.patch applied' : 'solution/solve.sh run'} (${after.last}): the check or the solution is wrong`,
    }
  return { task: task.name, ok: true, solution: true }
}

/** true: the check passed; else its output's last line; or a string: why it could not be run. */
async function attempt(
  task: EvalTask,
  config: Config,
  scratch: string,
  mirrors: string,
  hidden: readonly string[],
  solved: boolean,
): Promise<true | { last: string } | string> {
  const dir = mkdtempSync(join(scratch, `${task.name}-`))
  // Searchable by the sandbox's user, who runs the check in the workspace below.
  chmodSync(dir, 0o711)
  try {
    const workspace = join(dir, 'workspace')
    try {
      await startingTree(task, workspace, mirrors, config)
    } catch (err) {
      return `its starting tree could not be made: ${(err as Error).message}`
    }
    if (solved) {
      const applied = await applySolution(task, config, workspace, hidden)
      if (applied !== null) return applied
    }
    const check = await judge(task, config, workspace, hidden)
    if (check.error !== null) return check.error
    if (check.passed) return true
    const last = check.tail.trim().split('\n').pop() ?? ''
    return { last: check.timed_out ? 'it timed out' : `exit ${check.exit_code ?? 'by a signal'}: ${last.slice(0, 200)}` }
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
}
