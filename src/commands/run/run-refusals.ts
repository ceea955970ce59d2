import { existsSync } from 'node:fs'
import type { CommandEnv } from '../../command-env.js'
import { withTaskEnv } from '../../command-env.js'
import { LockedError, resumeRaceLost, UsageError } from '../../errors.js'
import { assessTask } from '../../operations/reaper.js'
import type { RunSettings } from '../../run/settings.js'
import type { TaskRef } from '../../storage/fs/layout.js'
import { stalenessPolicy } from '../../storage/task/env.js'
import type { TaskKey } from '../../storage/task/metadata.js'
import type { TaskState } from '../../storage/task/state.js'
import { shortPath } from '../../text.js'
import { inside, realPathOf } from '../../tools/workspace.js'

// What `run` refuses before anything is written: a config the agent could rewrite, a task still alive, a budget used up, a finished task.

/**
 * A config file inside the workspace is one the model could rewrite, MCP server commands
 * included, for the next command that reads it (docs/contract.md §8): refused, by real paths.
 */
export function refuseConfigInWorkspace(workspace: string, configFile: string | null): void {
  if (configFile === null) return
  const [ws, file] = [realPathOf(workspace), realPathOf(configFile)]
  if (!inside(ws, file)) return
  throw new UsageError(
    `the config file ${shortPath(file)} is inside the workspace ${shortPath(ws)}, where the agent could rewrite it`,
    'keep the config outside the workspace (~/.config/ctxagent/config.yaml, /etc/ctxagent/config.yaml, or --config elsewhere)',
  )
}

/**
 * A task in running/ is resumed only when its agent is provably dead (kill -9, a double
 * Ctrl-C, a crashed host); on this host a pid that is gone is proof enough (an
 * operator's request), and the takeover is said in one line.
 */
export async function refuseLive(ctx: CommandEnv, ref: TaskRef): Promise<void> {
  await withTaskEnv(
    ctx,
    async (env) => {
      const assessment = assessTask(env, ref, { policy: { ...stalenessPolicy(ctx.config), deadPidIsProof: true } })
      // Moved out of running/ while we looked (its owner finished or paused it): a lost race, as in stillThere (run-prepare.ts).
      if (!existsSync(ref.dir)) throw resumeRaceLost(ref.uuid)
      if (assessment.stale) {
        ctx.io.warn(`task ${ref.uuid} is in running/ but ${assessment.verdict.reason}; resume takes it over`)
        return
      }
      const who = assessment.holder ? `pid ${assessment.holder.process_id} on ${assessment.holder.hostname}` : 'its agent'
      throw new LockedError(`task ${ref.uuid} is running (${who}: ${assessment.reason})`, 'pause it first with ctxagent pause, or wait for it to finish')
    },
    { createIndex: false },
  )
}

/** Which budget the task has already used up with these settings, if any, and the flag that raises it. */
export function spentBudget(settings: RunSettings, state: TaskState | null): { budget: string; used: string; flag: string } | null {
  if (state === null) return null
  const turns = state.turns ?? 0
  if (turns >= settings.maxTurns)
    return { budget: 'max_turns', used: `${turns} of ${settings.maxTurns} turns`, flag: `--max-turns ${turns + Math.max(10, settings.maxTurns)}` }
  const tokens = state.total_tokens_used ?? 0
  if (settings.maxTokens !== null && tokens >= settings.maxTokens)
    return { budget: 'max_tokens', used: `${tokens} of ${settings.maxTokens} tokens`, flag: `--max-tokens ${tokens + settings.maxTokens}` }
  const elapsed = state.elapsed_ms ?? 0
  if (settings.timeoutMs !== null && elapsed >= settings.timeoutMs)
    return {
      budget: 'timeout',
      used: `${Math.round(elapsed / 1000)}s of ${Math.round(settings.timeoutMs / 1000)}s`,
      flag: `--timeout ${Math.ceil((elapsed + settings.timeoutMs) / 60_000)}m`,
    }
  return null
}

/** What to do with a finished task: a local one without a key cannot be inherited from. */
export function finishedHint(key: TaskKey): string {
  if (key.task_source === 'local' && !key.task_id)
    return 'start a new task (it has no --task-id, so nothing inherits from it; see ctxagent view for its summary)'
  return 'start a new task with the same task key (--task-id, or the same issue) to continue from its summary'
}
