import { describe, expect, it } from 'vitest'
import { closeVerdict } from '../../src/fleet/queue/task-outcome.js'
import type { ChildEnd, TaskSnapshot } from '../../src/fleet/queue/task-outcome.js'
import type { Job } from '../../src/fleet/queue/job.js'
import type { RetryPolicy } from '../../src/fleet/queue/retry-policy.js'
import { initialState } from '../../src/storage/task/state.js'
import type { TaskState } from '../../src/storage/task/state.js'

// The worker's decision when a job's process closes (src/fleet/queue/task-outcome.ts), for each way a job can end.

const job = (kind: 'new' | 'resume', attempts = 1): Job => ({
  id: 7,
  task_uuid: '00000000-0000-4000-8000-000000000007',
  kind,
  spec: {},
  state: 'running',
  priority: 0,
  attempts,
  claimed_by: 'w',
  user: null,
})
const exited = (code: number | null, more: Partial<ChildEnd> = {}): ChildEnd => ({ code, signal: null, stopped: false, lastLine: '', ...more })
const killed = (signal: NodeJS.Signals, more: Partial<ChildEnd> = {}): ChildEnd => ({ code: null, signal, stopped: false, lastLine: '', ...more })
const state = (more: Partial<TaskState>): TaskState => ({ ...initialState(new Date('2024-06-01T00:00:00Z')), ...more })
const at = (location: TaskSnapshot['location'], more: Partial<TaskState> = {}, unchanged = false): TaskSnapshot => ({
  location,
  state: location === null ? null : state(more),
  unchanged,
})
const retry: RetryPolicy = { base_seconds: 30, max_seconds: 600, max_attempts: 5 }
const policy = { maxAttempts: 3, retry: undefined }

describe('closeVerdict: how a job ended', () => {
  it('completed with its delivery refused or failed (run exits 6): the job ends undelivered with the reason, no retry; no changes is completed', () => {
    const delivery = (refused: string | null) => ({ mode: 'pr' as const, branch: null, commit: null, pushed: false, pr: null, refused })
    expect(
      closeVerdict(
        job('new'),
        false,
        exited(6),
        at('completed', { status: 'completed', delivery: delivery('not delivered: .env matches deliver.exclude (.env*)') }),
        policy,
      ),
    ).toEqual({
      kind: 'end',
      end: { outcome: 'undelivered', error: 'not delivered: .env matches deliver.exclude (.env*)' },
    })
    expect(
      closeVerdict(job('resume'), true, exited(6), at('completed', { status: 'completed', delivery: delivery('delivery failed: git push: rejected') }), {
        maxAttempts: 3,
        retry,
      }),
    ).toEqual({
      kind: 'end',
      end: { outcome: 'undelivered', error: 'not delivered: delivery failed: git push: rejected' },
    })
    expect(
      closeVerdict(
        job('new'),
        false,
        exited(0),
        at('completed', { status: 'completed', delivery: delivery('no changes: the workspace holds nothing') }),
        policy,
      ),
    ).toEqual({
      kind: 'end',
      end: { outcome: 'completed', error: null },
    })
  })

  it("an eval's trial stopped during its hidden check (130/143, its task completed): its resume is queued, to judge it; a run's job is not", () => {
    const trial = { ...job('new'), spec: { eval: { id: 'abcdef012345', task: 'add', variant: 'good', run: 1 } } }
    for (const code of [130, 143])
      expect(closeVerdict(trial, false, exited(code, { stopped: true }), at('completed', { status: 'completed' }), policy)).toEqual({
        kind: 'end',
        end: { outcome: 'paused', resume: true, error: null },
      })
    expect(closeVerdict(trial, false, exited(0), at('completed', { status: 'completed' }), policy)).toEqual({
      kind: 'end',
      end: { outcome: 'completed', error: null },
    })
    expect(closeVerdict(job('new'), false, exited(143), at('completed', { status: 'completed' }), policy)).toEqual({
      kind: 'end',
      end: { outcome: 'completed', error: null },
    })
  })

  it('completed, failed or timed out: the job ends with its status (and its error)', () => {
    expect(closeVerdict(job('new'), false, exited(0), at('completed', { status: 'completed' }), policy)).toEqual({
      kind: 'end',
      end: { outcome: 'completed', error: null },
    })
    expect(closeVerdict(job('new'), false, exited(1), at('completed', { status: 'failed', error: 'boom' }), policy)).toEqual({
      kind: 'end',
      end: { outcome: 'failed', error: 'boom' },
    })
    expect(closeVerdict(job('resume'), true, exited(5), at('completed', { status: 'timeout', error: 'max turns' }), policy)).toEqual({
      kind: 'end',
      end: { outcome: 'timeout', error: 'max turns' },
    })
    // Its agent died after the move to completed/, before the last state write.
    expect(closeVerdict(job('new'), false, killed('SIGKILL'), at('completed', { status: 'completing' }), policy)).toEqual({
      kind: 'end',
      end: { outcome: 'completed', error: null },
    })
  })

  it('paused by a signal or by its worker: done, its resume queued', () => {
    expect(closeVerdict(job('new'), false, exited(143), at('paused', { status: 'paused' }), policy)).toEqual({
      kind: 'end',
      end: { outcome: 'paused', resume: true, error: null },
    })
    expect(closeVerdict(job('new'), false, exited(130), at('paused', { status: 'paused' }), policy)).toEqual({
      kind: 'end',
      end: { outcome: 'paused', resume: true, error: null },
    })
    expect(closeVerdict(job('resume'), true, exited(0, { stopped: true }), at('paused', { status: 'paused' }), policy)).toEqual({
      kind: 'end',
      end: { outcome: 'paused', resume: true, error: null },
    })
  })

  it('paused by its operator or its agent: done, no resume queued (theirs to resume)', () => {
    expect(closeVerdict(job('new'), false, exited(0), at('paused', { status: 'paused', paused_by: 'operator' }), policy)).toEqual({
      kind: 'end',
      end: { outcome: 'paused', resume: false, error: null },
    })
  })

  it('paused by an LLM failure that passes: retried later under fleet.retry; without it, paused with the error', () => {
    const outage = at('paused', { status: 'paused', paused_by: 'llm', llm_failure: 'unreachable', error: 'connection refused' })
    expect(closeVerdict(job('new'), false, exited(0), outage, { maxAttempts: 3, retry })).toEqual({
      kind: 'end',
      end: { outcome: 'paused', error: 'connection refused', retry },
    })
    expect(closeVerdict(job('new'), false, exited(0), outage, policy)).toEqual({
      kind: 'end',
      end: { outcome: 'paused', resume: false, error: 'connection refused' },
    })
    // An LLM failure that does not pass by itself (a bad key): not retried.
    const lasting = at('paused', { status: 'paused', paused_by: 'llm', llm_failure: null, error: '401' })
    expect(closeVerdict(job('new'), false, exited(0), lasting, { maxAttempts: 3, retry })).toEqual({
      kind: 'end',
      end: { outcome: 'paused', resume: false, error: '401' },
    })
  })

  it("a new task never created: the job fails with run's last log message", () => {
    const line = JSON.stringify({ ts: '…', level: 'error', msg: 'the workspace is not a directory' })
    expect(closeVerdict(job('new'), false, exited(2, { lastLine: line }), at(null), policy)).toEqual({
      kind: 'end',
      end: { outcome: 'failed', failed: true, error: 'the workspace is not a directory' },
    })
    expect(closeVerdict(job('new'), false, exited(1), at(null), policy)).toEqual({
      kind: 'end',
      end: { outcome: 'failed', failed: true, error: 'run exited with 1' },
    })
  })

  it('killed before its task began: handed back at once, counting the attempt; the last attempt fails a new job, leaves a resume paused', () => {
    expect(closeVerdict(job('new', 2), false, killed('SIGKILL'), at(null), policy)).toEqual({
      kind: 'hand_back',
      why: 'was killed (SIGKILL)',
      error: 'its agent was killed (SIGKILL) before the task began (attempt 2 of fleet.max_attempts 3)',
      last: { outcome: 'failed', error: 'its agent was killed (SIGKILL) before the task began (attempt 2 of fleet.max_attempts 3)', reason: 'killed' },
      waitMs: 0,
      maxAttempts: 3,
    })
    const resumed = closeVerdict(job('resume'), true, killed('SIGKILL'), at('paused', { status: 'paused' }, true), policy)
    expect(resumed).toMatchObject({ kind: 'hand_back', last: { outcome: 'paused' }, waitMs: 0 })
  })

  it('a resume that found its task locked (exit 4, the paused task unchanged): handed back after a pause that grows, at most 5 s', () => {
    const locked = (attempts: number) => closeVerdict(job('resume', attempts), true, exited(4), at('paused', { status: 'paused' }, true), policy)
    expect(locked(1)).toMatchObject({ kind: 'hand_back', why: 'found the task locked', waitMs: 1000, last: { reason: 'refused' } })
    expect(locked(2)).toMatchObject({ waitMs: 2000 })
    expect(locked(9)).toMatchObject({ waitMs: 5000 })
  })

  it('killed after its task began: not handed back, the job ends (or waits for watch-locks) as the task says', () => {
    // A resume whose task changed (its agent wrote state.json), then paused: settled from the task.
    expect(closeVerdict(job('resume'), true, killed('SIGKILL'), at('paused', { status: 'paused', paused_by: 'operator' }, false), policy)).toEqual({
      kind: 'end',
      end: { outcome: 'paused', resume: false, error: null },
    })
    // A new task created, its process killed holding the lock: left for watch-locks.
    // Said by how it ended, and the last problem it reported (worker-log.ts problemIn).
    expect(closeVerdict(job('new'), false, killed('SIGKILL', { lastLine: 'the index could not be written' }), at('running'), policy)).toEqual({
      kind: 'left_running',
      detail: 'killed by SIGKILL; its last problem: the index could not be written',
    })
    expect(closeVerdict(job('new'), false, exited(1), at('running'), policy)).toEqual({ kind: 'left_running', detail: 'exit 1' })
  })

  it('stopped by its worker before its task was created: released as it was (its attempt not counted)', () => {
    expect(closeVerdict(job('new'), false, killed('SIGTERM', { stopped: true }), at(null), policy)).toEqual({ kind: 'release' })
    expect(closeVerdict(job('new'), false, exited(143, { stopped: true }), at(null), policy)).toEqual({ kind: 'release' })
  })

  it('its task run by another process (exit 4, the task in running/): the job ends when that run does', () => {
    expect(closeVerdict(job('resume'), true, exited(4), at('running'), policy)).toEqual({ kind: 'elsewhere' })
    expect(closeVerdict(job('new'), false, exited(4), at('running'), policy)).toEqual({ kind: 'elsewhere' })
    // Stopped by its worker meanwhile: not someone else's run, left for watch-locks.
    expect(closeVerdict(job('new'), false, exited(4, { stopped: true }), at('running'), policy)).toEqual({ kind: 'left_running', detail: 'exit 4' })
  })
})

describe('closeVerdict: refused by a cost cap before its task began (exit 5; docs/fleet-operations.md#waits)', () => {
  const line = JSON.stringify({
    level: 'error',
    msg: 'the user-daily cost cap (budgets.user_daily_usd: $1.00) is spent: …; it resets at 2030-01-16T00:00:00.000Z',
  })

  it('is handed back (the next claim sees the spend and makes it wait), at most fleet.max_attempts times; a task that ran is not', () => {
    expect(closeVerdict(job('new'), false, exited(5, { lastLine: line }), at(null), policy)).toMatchObject({
      kind: 'hand_back',
      why: 'was refused (the user-daily cost cap (budgets.user_daily_usd: $1.00) is spent: …; it resets at 2030-01-16T00:00:00.000Z)',
      last: { outcome: 'failed', reason: 'refused' },
      waitMs: 1000,
      maxAttempts: 3,
    })
    // A resume refused: its paused task untouched.
    expect(closeVerdict(job('resume', 2), true, exited(5), at('paused', { status: 'paused', paused_by: 'budget' }, true), policy)).toMatchObject({
      kind: 'hand_back',
      last: { outcome: 'paused' },
      waitMs: 2000,
    })
    // A resume refused by its task's own cap (no reset will lift it): ended paused for someone to raise it, not handed back.
    const own = JSON.stringify({
      level: 'error',
      msg: "task 0000cafe-…'s cost cap (run.max_cost_usd: $0.50) is spent: $0.49 spent, its next request may cost $0.02",
    })
    expect(
      closeVerdict(
        job('resume'),
        true,
        exited(5, { lastLine: own }),
        at('paused', { status: 'paused', paused_by: 'budget', budget_cap: 'task' }, true),
        policy,
      ),
    ).toMatchObject({ kind: 'end', end: { outcome: 'paused', reason: 'budget', cap: 'task', error: expect.stringContaining('run.max_cost_usd') } })
    // The same in a text-mode log line.
    const text = "ctxagent: task 0000cafe-…'s cost cap (run.max_cost_usd (--max-cost): $0.05) is spent: $0.00 spent, its next request may cost $0.10"
    expect(closeVerdict(job('resume'), true, exited(5, { lastLine: text }), at('paused', { status: 'paused' }, true), policy)).toMatchObject({ kind: 'end' })
    // Paused by a cap after it ran (its state changed): the job ends with that pause.
    expect(
      closeVerdict(job('resume'), true, exited(5), at('paused', { status: 'paused', paused_by: 'budget', budget_cap: 'task', resume_at: null }, false), policy),
    ).toMatchObject({ kind: 'end', end: { reason: 'budget', cap: 'task' } })
  })
})
