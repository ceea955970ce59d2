import type { CommandEnv } from '../../command-env.js'
import { CorruptRecordError, CtxError, LockedError, NotFoundError, UsageError } from '../../errors.js'
import { resolveTask } from '../../storage/fs/layout.js'
import type { TaskRef } from '../../storage/fs/layout.js'
import { readState } from '../../storage/task/state.js'
import type { TaskState } from '../../storage/task/state.js'
import type { Outcome } from '../../run/outcome.js'
import { BudgetSpentError } from '../../run/budget-start.js'

// How `run` ends when its loop could not make an outcome (JSON log mode, docs/contract.md §12.5).

/** The task this run made or took, once it exists. */
export interface Started {
  uuid: string | null
}

/** Refused before anything ran (bad input, no such task, a live owner, a damaged task): the one-line form of every command (docs/contract.md §9). */
export function isRefusal(err: unknown): boolean {
  return (
    err instanceof UsageError ||
    err instanceof NotFoundError ||
    err instanceof LockedError ||
    err instanceof CorruptRecordError ||
    err instanceof BudgetSpentError ||
    (err instanceof CtxError && err.logged)
  )
}

/** The outcome of a run that ended in an error: the task as it is now, when it exists. */
export function failedOutcome(
  ctx: CommandEnv,
  uuid: string | null,
  err: CtxError,
): Omit<Outcome, 'uuid' | 'location' | 'dir'> & { uuid: string | null; location: string | null; dir: string | null } {
  let ref: TaskRef | null = null
  try {
    ref = uuid === null ? null : resolveTask(ctx.layout, uuid)
  } catch {
    // Gone (or never made): the outcome says so with a null location.
  }
  const state = ref === null ? null : readStateOrNull(ref.dir)
  return {
    uuid,
    status: state?.status ?? 'failed',
    location: ref?.location ?? null,
    dir: ref?.dir ?? null,
    turns: state?.turns ?? 0,
    tokens: state?.total_tokens_used ?? 0,
    duration_ms: state?.elapsed_ms ?? 0,
    final_answer: state?.final_answer ?? null,
    finish_status: null,
    error: err.message,
    inherited_from: null,
    exit_code: err.exitCode,
  }
}

function readStateOrNull(dir: string): TaskState | null {
  try {
    return readState(dir)
  } catch {
    return null
  }
}
