import { chmodSync, closeSync, constants, cpSync, fstatSync, mkdirSync, openSync, readSync, rmSync } from 'node:fs'
import { join } from 'node:path'
import type { Config } from '../config/schema.js'
import { git } from '../delivery/git.js'
import { giveWorkspace, sandboxIdentity } from '../tools/sandbox/identity.js'
import { runCheck } from './check.js'
import type { CheckResult } from './check.js'
import type { EvalTask } from './suite.js'
import { placeHidden } from './workspace.js'

/** A task's workspace to judge (or to solve), and where its check runs (check.ts's CheckPlace: `root`, `signal`). */
export interface JudgeInput {
  task: EvalTask
  config: Config
  /** The task's workspace: the agent's result (eval run) or its starting tree (eval check). */
  workspace: string
  /** Real paths no command may see: the task tree, the config file, the suite. */
  hidden: readonly string[]
  /** The environment's image root the agent's commands ran in; null: the host's system. */
  root: string | null
  /** The eval's stop: the check's sandbox is ended at once (docs/eval.md#a-stop). */
  signal: AbortSignal
}

/**
 * Puts the task's hidden check in after the agent has finished and runs it in the
 * sandbox (docs/eval.md#a-trial): task.yaml's tests/ copied into the workspace and its
 * `check` run there; Harbor's tests/ shown at /tests and its test.sh run, its verdict the
 * reward it writes to /logs/verifier (docs/eval.md#harbor-tasks). `root`: the image the
 * agent's commands ran in (null: the host's system).
 */
export async function judge({ task, config, workspace, hidden, root, signal }: JudgeInput): Promise<CheckResult> {
  if (task.layout === 'ctxagent') {
    placeHidden(task, workspace)
    return runCheck(config, workspace, task.check, task.checkTimeoutMs, hidden, { root, signal })
  }
  const aside = beside(workspace, config, join(task.dir, 'tests'))
  try {
    const check = await runCheck(config, workspace, task.check, task.checkTimeoutMs, hidden, {
      root,
      signal,
      binds: [
        { from: aside.copy, to: '/tests' },
        { from: aside.logs, to: '/logs/verifier' },
      ],
    })
    if (check.error !== null || check.stopped) return check
    const reward = rewardOf(aside.logs)
    // No reward written: test.sh's exit status is the verdict, as for task.yaml's check.
    return reward === null ? check : { ...check, passed: reward >= 1, tail: `${check.tail}\n(reward ${reward})`.slice(-2000) }
  } finally {
    rmSync(aside.root, { recursive: true, force: true })
  }
}

/**
 * Applies the task's reference solution to the starting tree (eval check), solve.sh in `root` as an agent's command: null,
 * or why it could not; `stopped` when `signal` ended solve.sh (no verdict on the task).
 */
export async function applySolution({ task, config, workspace, hidden, root, signal }: JudgeInput): Promise<string | null | { stopped: true }> {
  const solution = task.solution
  if (solution === null) return null
  if (solution.kind === 'patch')
    return git(['apply', '--whitespace=nowarn', '--', solution.file], { safeDir: workspace, cwd: workspace }).then(
      () => null,
      (err: Error) => `solution.patch does not apply: ${err.message.split('\n')[0] ?? 'git apply failed'}`,
    )
  // Harbor's oracle: solution/ at /solution, its solve.sh run in the workspace.
  const aside = beside(workspace, config, solution.dir)
  try {
    const run = await runCheck(config, workspace, 'bash /solution/solve.sh', task.checkTimeoutMs, hidden, {
      root,
      signal,
      binds: [{ from: aside.copy, to: '/solution', readOnly: true }],
    })
    if (run.stopped) return { stopped: true }
    if (run.error !== null) return run.error
    if (!run.passed) return `solution/solve.sh failed (${run.timed_out ? 'it timed out' : `exit ${run.exit_code ?? 'by a signal'}`})`
    return null
  } finally {
    rmSync(aside.root, { recursive: true, force: true })
  }
}

/**
 * A copy of one of the suite's directories beside the workspace (the suite itself is
 * hidden from the sandbox, and its user may not read it) and an empty logs directory,
 * both the sandbox user's.
 */
function beside(workspace: string, config: Config, from: string): { root: string; copy: string; logs: string } {
  const root = `${workspace}.verifier`
  rmSync(root, { recursive: true, force: true })
  mkdirSync(root, { mode: 0o700 })
  const copy = join(root, 'copy')
  cpSync(from, copy, { recursive: true, verbatimSymlinks: true })
  const logs = join(root, 'logs')
  mkdirSync(logs)
  chmodSync(root, 0o755)
  giveWorkspace(root, sandboxIdentity(config.tools, workspace))
  return { root, copy, logs }
}

/** The reward test.sh wrote: reward.txt's number, else reward.json's `reward`; null: none. What is there is read as an untrusted file (no link followed). */
function rewardOf(logs: string): number | null {
  const txt = smallFile(join(logs, 'reward.txt'))
  if (txt !== null) {
    const n = Number.parseFloat(txt.trim())
    return Number.isFinite(n) ? n : 0
  }
  const json = smallFile(join(logs, 'reward.json'))
  if (json === null) return null
  try {
    const doc = JSON.parse(json) as { reward?: unknown }
    return typeof doc.reward === 'number' ? doc.reward : 0
  } catch {
    return 0
  }
}

/** A regular file's first 4 KB; null when there is none (a link or anything else counts as none). */
function smallFile(path: string): string | null {
  let fd: number
  try {
    fd = openSync(path, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK)
  } catch {
    return null
  }
  try {
    if (!fstatSync(fd).isFile()) return null
    const buffer = Buffer.alloc(4096)
    return buffer.subarray(0, readSync(fd, buffer, 0, buffer.length, 0)).toString('utf8')
  } finally {
    closeSync(fd)
  }
}
