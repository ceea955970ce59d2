import { existsSync } from 'node:fs'
import { join } from 'node:path'
import { CtxError, LockedError } from '../errors.js'
import { FILES } from '../storage/fs/layout.js'
import type { TaskRef } from '../storage/fs/layout.js'
import { TaskLock } from '../storage/lock/lock.js'
import { writeWindow } from '../storage/task/message-store.js'
import { assessTask, reapTask } from './reaper.js'
import { refreshIndex } from '../storage/task/lifecycle.js'
import type { ReapReport } from './reaper.js'
import { toWindowMessage } from '../storage/format/records.js'
import type { StoredMessage, SummaryRecord } from '../storage/format/records.js'
import { updateState } from '../storage/task/state.js'
import { SummaryStore } from '../storage/task/stores.js'
import { stalenessPolicy } from '../storage/task/env.js'
import type { TaskEnv } from '../storage/task/env.js'
import { estimateTokens, windowTokens } from '../storage/format/tokens.js'
import { compact, planCompaction } from '../context/compaction.js'
import type { CompactionSettings } from '../context/compaction.js'
import { loadSnapshot } from '../context/snapshot.js'
import type { Summarizer } from '../context/summarizer.js'

export type CompressOutcome =
  | { kind: 'nothing'; uuid: string; reason: string }
  | {
      kind: 'plan'
      uuid: string
      start_seq: number
      end_seq: number
      messages: number
      kept: number
      tokens_before: number
      expected_tokens_after: number
      method: Summarizer['method']
    }
  | { kind: 'done'; uuid: string; record: SummaryRecord; tokens_before: number; tokens_after: number; reaped: ReapReport | null }

/**
 * `ctxagent compress`: summarize a task's context on demand. Works on tasks no live
 * process owns (paused, completed/failed, or running with a dead owner, reaped
 * first); never writes a file that a live process owns. Holds the task's lock while
 * it works, and writes nothing until the summary exists.
 */
export async function compressTask(
  env: TaskEnv,
  start: TaskRef,
  settings: CompactionSettings,
  summarizer: Summarizer,
  dryRun: boolean,
): Promise<CompressOutcome> {
  let ref = start
  let reaped: ReapReport | null = null
  const policy = stalenessPolicy(env.config)
  if (ref.location === 'running') {
    const assessment = assessTask(env, ref, { policy })
    // A dry run only reads, which is safe beside a live owner.
    if (!assessment.stale && !dryRun) {
      const who = assessment.holder ? `pid ${assessment.holder.process_id} on ${assessment.holder.hostname}` : 'its owner'
      throw new LockedError(
        `task ${ref.uuid} is running (${who}); its owner compresses it near the limit`,
        'pause the task first, or wait; ctxagent never writes files a live process owns',
      )
    }
    if (!dryRun) {
      const outcome = await reapTask(env, ref, { policy })
      if (!outcome.done) throw new LockedError(`task ${ref.uuid} could not be taken over: ${outcome.reason}`, 'try again')
      reaped = outcome.report
      ref = { uuid: ref.uuid, location: 'completed', dir: env.layout.taskDir('completed', ref.uuid) }
    }
  }
  if (!existsSync(join(ref.dir, FILES.messages))) {
    const archived = existsSync(join(ref.dir, `${FILES.messages}.gz`))
    throw new CtxError(`task ${ref.uuid} ${archived ? 'is archived (gzipped by cleanup)' : 'has no messages.jsonl'}`, {
      hint: archived ? 'an archived task is final; there is nothing to resume' : 'check the task directory',
    })
  }
  const snapshot = await loadSnapshot(ref.dir)
  const plan = planCompaction(snapshot, settings)
  if (plan === null) {
    const count = snapshot.after.filter((m) => m.seq !== snapshot.system?.seq).length
    return {
      kind: 'nothing',
      uuid: ref.uuid,
      reason: `${count} message(s) since the last summary; keeping ${settings.keepRecent} leaves fewer than ${settings.minToCompress} to summarize`,
    }
  }
  if (dryRun) {
    const estimate =
      summarizer.method === 'extractive'
        ? estimateTokens(await summarizer.summarize(snapshot.summary?.summary ?? null, plan.summarize, snapshot.task))
        : Math.min(2000, Math.ceil(plan.summarize.reduce((s, m) => s + m.token_count, 0) * 0.15))
    const carried = [snapshot.system, snapshot.task, ...plan.keep].filter((m): m is StoredMessage => m !== null)
    const kept = windowTokens(carried.map(toWindowMessage))
    return {
      kind: 'plan',
      uuid: ref.uuid,
      start_seq: (plan.summarize[0] as { seq: number }).seq,
      end_seq: (plan.summarize.at(-1) as { seq: number }).seq,
      messages: plan.summarize.length,
      kept: plan.keep.length,
      tokens_before: plan.tokensBefore,
      expected_tokens_after: kept + estimate + 30,
      method: summarizer.method,
    }
  }
  const lock = await TaskLock.acquire(ref.dir, { ...policy, now: env.now })
  try {
    const result = await compact(
      plan,
      summarizer,
      {
        // Opened only once the summary exists: a failed summarizer leaves every file as it was.
        addSummary: (record) => {
          const summaries = SummaryStore.open(ref.dir, { now: env.now })
          try {
            return summaries.add(record)
          } finally {
            summaries.close()
          }
        },
        replaceCurrent: (window) => void writeWindow(ref.dir, window),
      },
      env.now(),
    )
    const state = await updateState(ref.dir, (s) => ({ compression_count: s.compression_count + 1, current_context_tokens: result.tokensAfter }), env.now())
    await refreshIndex(env, ref, state)
    return { kind: 'done', uuid: ref.uuid, record: result.record, tokens_before: result.tokensBefore, tokens_after: result.tokensAfter, reaped }
  } finally {
    await lock.release()
  }
}
