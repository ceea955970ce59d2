import type { Config } from '../config/schema.js'
import { planSandbox } from '../tools/sandbox.js'
import { workspaceUnwritable } from '../tools/sandbox/identity.js'
import { runScript } from '../workspace/environment/sandboxed.js'

/** How a check ended: passed is exit 0; `tail` is the masked end of its output. */
export interface CheckResult {
  passed: boolean
  exit_code: number | null
  timed_out: boolean
  /** Ended by the eval's stop (SIGINT, SIGTERM): no verdict at all (docs/eval.md#a-stop). */
  stopped: boolean
  tail: string
  /** Why it could not run (no sandbox), else null. */
  error: string | null
}

const CHECK_TAIL = 2000

/** Where a check runs besides the workspace. */
export interface CheckPlace {
  /** The environment's image root the check runs in, as the agent's commands did (docs/eval.md#a-trial); null: the host's system. */
  root: string | null
  /** Directories shown at paths of their own (a Harbor task's /tests). */
  binds?: readonly { from: string; to: string; readOnly?: boolean }[]
  /** The eval's stop: the check's sandbox is ended at once (docs/eval.md#a-stop). */
  signal: AbortSignal
}

/**
 * Runs a task's check command in the workspace, in the command sandbox with no network
 * and none of ctxagent's secrets (docs/eval.md#a-trial), bounded by `timeoutMs`.
 * `hidden`: real paths no command may see (the task tree, the config file, the suite).
 */
export async function runCheck(
  config: Config,
  workspace: string,
  command: string,
  timeoutMs: number,
  hidden: readonly string[],
  place: CheckPlace,
): Promise<CheckResult> {
  const planned = planSandbox(config.tools, hidden, workspace)
  if (!planned.ok)
    return { passed: false, exit_code: null, timed_out: false, stopped: false, tail: '', error: `the check runs in the sandbox, and ${planned.why}` }
  if (planned.plan.kind !== 'bwrap')
    return {
      passed: false,
      exit_code: null,
      timed_out: false,
      stopped: false,
      tail: '',
      error: 'the check runs in the sandbox, and tools.sandbox is none (set it to bwrap)',
    }
  // A workspace the sandbox's user cannot enter makes bwrap fail with exit 1: that is no verdict on the task.
  const unreachable = workspaceUnwritable(planned.plan.identity, workspace)
  if (unreachable !== null) return { passed: false, exit_code: null, timed_out: false, stopped: false, tail: '', error: unreachable }
  const plan = place.root === null ? planned.plan : { ...planned.plan, root: place.root }
  const run = await runScript({ plan, workspace, script: command, hosts: null, timeoutMs, log: null, binds: place.binds ?? [], signal: place.signal })
  return {
    passed: run.code === 0 && !run.timedOut && !run.stopped,
    exit_code: run.code,
    timed_out: run.timedOut,
    stopped: run.stopped,
    tail: run.tail.slice(-CHECK_TAIL),
    error: run.error,
  }
}
