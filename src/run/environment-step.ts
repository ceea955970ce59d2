import { join } from 'node:path'
import { SETUP_FAILED_EXIT } from '../errors.js'
import type { TaskHandle } from '../storage/task/handle.js'
import type { ImageRecord, TestRun } from '../storage/task/state.js'
import { planSandbox } from '../tools/sandbox.js'
import { environmentStore, prepareEnvironment } from '../workspace/environment/prepare.js'
import type { EnvironmentRecord } from '../workspace/environment/prepare.js'
import { recordedImage } from '../workspace/environment/image.js'
import type { ImageResult } from '../workspace/environment/image.js'
import { runScript } from '../workspace/environment/sandboxed.js'
import type { TrustedBase } from '../workspace/trusted-base.js'
import { imageText } from '../storage/task/environment-view.js'
import type { RunLog } from './log.js'
import type { Outcome } from './outcome.js'
import type { RunEnv } from './run-start.js'

// A new task's environment, prepared before its first LLM request, and its test command run after its agent (docs/environments.md).

/** The setup log, kept with the task (docs/formats.md#setuplog). */
export const SETUP_LOG = 'setup.log'
export const TEST_TIMEOUT_MS = 10 * 60_000

/**
 * ready: the note for the agent (null: none) and `root`, the image's root file system the agent's commands run in
 * (null: the host's system); stopped: a stop came during setup, the task goes on to pause (its resume prepares again).
 */
export type EnvironmentStep =
  | { kind: 'ready'; note: string | null; root: string | null }
  | { kind: 'stopped' }
  | { kind: 'failed'; outcome: Outcome; failure: SetupFailure }

/** What a forge task's issue is told of a failed environment (setupFailedComment), once the attempt is known. */
export interface SetupFailure {
  uuid: string
  error: string
  tail: string | null
}

/**
 * The task's environment made ready, recorded in state.json and said in the log; the
 * agent gets a short note of what it holds (never setup's output). A failure ends the
 * task `setup_failed` in completed/ before any LLM request.
 */
export async function environmentStep(
  run: RunEnv,
  handle: TaskHandle,
  hidden: readonly string[],
  log: RunLog,
  began: number,
  signal: AbortSignal,
  base: TrustedBase,
): Promise<EnvironmentStep> {
  const key = handle.metadata.task_key
  const prepared = await prepareEnvironment({
    base,
    config: run.config,
    workspace: run.settings.workspace,
    repository: key.owner !== null && key.repo !== '' ? `${key.owner}/${key.repo}` : run.settings.environmentOf,
    hidden,
    log: join(handle.dir, SETUP_LOG),
    store: environmentStore(run.config, run.env.layout.base),
    signal,
  })
  if (prepared.kind === 'none') return { kind: 'ready', note: null, root: null }
  await handle.update({ environment: prepared.record })
  if (prepared.kind === 'stopped') {
    // The stop's own line has been said; the loop's first check pauses the task (docs/environments.md#a-stop-during-setup).
    log.info(`environment not ready: ${prepared.record.error ?? 'stopped'}; its processes were ended, a resume prepares it again`)
    return { kind: 'stopped' }
  }
  if (prepared.kind === 'ready') {
    log.info(`environment ready (${describeRecord(prepared.record)})`)
    return { kind: 'ready', note: agentNote(prepared.record), root: prepared.root }
  }
  return setupFailed(handle, `the environment could not be prepared: ${prepared.record.error ?? 'unknown'}`, prepared.record.tail, log, began)
}

/**
 * A resumed task's environment: nothing is prepared again, but a task that started in an
 * image goes on in it (the same digest), or does not go on at all.
 */
export async function resumedEnvironment(run: RunEnv, handle: TaskHandle, hidden: readonly string[], log: RunLog, began: number): Promise<EnvironmentStep> {
  const image = handle.state.environment?.image
  if (image === undefined) return { kind: 'ready', note: null, root: null }
  const got = await taskImage(run, image, hidden)
  if (got.ok) return { kind: 'ready', note: null, root: got.root }
  return setupFailed(handle, `the environment could not be prepared again: ${got.error}`, null, log, began)
}

/** The root of the image a task recorded. */
function taskImage(run: RunEnv, image: ImageRecord, hidden: readonly string[]): Promise<ImageResult> {
  const planned = planSandbox(run.config.tools, hidden, run.settings.workspace)
  const identity = planned.ok && planned.plan.kind === 'bwrap' && process.getuid?.() === 0 ? planned.plan.identity : null
  return recordedImage(image, { store: environmentStore(run.config, run.env.layout.base), identity, hidden, workspace: run.settings.workspace })
}

async function setupFailed(handle: TaskHandle, error: string, tail: string | null, log: RunLog, began: number): Promise<EnvironmentStep> {
  handle.addPlan('outcome', `setup_failed: ${error}`)
  await handle.fail(error, 'setup_failed')
  log.warn(`setup_failed: ${error}${tail ? `; the setup log's tail:\n${tail.trimEnd().split('\n').slice(-10).join('\n')}` : ''}`)
  return {
    kind: 'failed',
    failure: { uuid: handle.uuid, error, tail },
    outcome: {
      uuid: handle.uuid,
      status: 'setup_failed',
      location: 'completed',
      dir: handle.dir,
      turns: 0,
      tokens: 0,
      duration_ms: Date.now() - began,
      final_answer: null,
      finish_status: null,
      error,
      inherited_from: handle.metadata.inherited_from ?? null,
      exit_code: SETUP_FAILED_EXIT,
    },
  }
}

/** The most of the setup log's tail an issue is shown: its last lines, bounded in characters too. */
const COMMENT_TAIL_LINES = 20
const COMMENT_TAIL_CHARS = 2048

/**
 * What the issue of a forge task is told when its environment fails (docs/environments.md#when-setup-fails):
 * the error, the setup log's tail as data in a code fence no line of it can close, what the operator can do,
 * and, last, the attempt's line (attemptLine) by which a later attempt on the same base finds it to update it.
 */
export function setupFailedComment({ uuid, error, tail }: SetupFailure, attempt: { n: number; base: string }): string {
  const lines = (tail ?? '').trimEnd().split('\n').slice(-COMMENT_TAIL_LINES).join('\n')
  const shown = lines.length > COMMENT_TAIL_CHARS ? `…${lines.slice(-COMMENT_TAIL_CHARS)}` : lines
  const fence = '`'.repeat(Math.max(3, ...[...shown.matchAll(/`+/g)].map((m) => m[0].length + 1)))
  return [
    `**ctxagent** could not start on this (task \`${uuid}\`): setup_failed: ${error}. No agent ran and no LLM request was made.`,
    ...(shown.trim() === '' ? [] : ["The setup log's last lines:", `${fence}text\n${shown}\n${fence}`]),
    "The operator can check the repository's `.ctxagent/environment.yml` on its default branch (and `environments` in ctxagent's config), " +
      'run its setup by hand with `ctxagent env prepare --workspace DIR` (or `--repo URL`), and read the whole log with `ctxagent view ' +
      uuid.slice(0, 8) +
      '`; then run the task again.',
    attemptLine(attempt),
  ].join('\n\n')
}

/** The comment's last line: which attempt on which base (a commit; `workspace` or `none` without one). */
const attemptLine = ({ n, base }: { n: number; base: string }): string => `Attempt ${n} on base \`${base}\`; a later attempt on this base updates this comment.`

const ATTEMPT = /^Attempt (\d{1,9}) on base `([0-9a-z]{1,64})`; a later attempt on this base updates this comment\.$/

/** The attempt and base a comment of setupFailedComment's says on its last line before the marker, or null. */
export function attemptOf(body: string): { n: number; base: string } | null {
  const lines = body
    .trimEnd()
    .split('\n')
    .filter((l) => l.trim() !== '')
  const m = ATTEMPT.exec(lines.at(-2)?.trim() ?? '')
  return m === null ? null : { n: Number(m[1]), base: m[2] as string }
}

function describeRecord(r: EnvironmentRecord): string {
  const from = [r.file, r.operator === null ? null : `environments.${r.operator}`].filter((x) => x !== null).join(' and ')
  const cache = r.cache === 'none' ? 'no setup' : `cache ${r.cache}${r.setup_seconds !== null ? `, setup ${r.setup_seconds}s` : ''}`
  return `${from}; ${cache}${r.restored.length > 0 ? `; restored ${r.restored.join(', ')}` : ''}${r.kept.length > 0 ? `; kept the checkout's ${r.kept.join(', ')}` : ''}${r.image !== undefined ? `; ${imageText(r.image)}` : ''}`
}

/** What the agent is told: that the environment is ready, what it holds, and the test command. */
export function agentNote(r: EnvironmentRecord): string {
  const holds = [...r.restored, ...r.kept]
  return [
    "[ctxagent] The repository's environment is ready: its setup has run (you need not install dependencies).",
    holds.length > 0 ? `Prepared in the workspace: ${holds.join(', ')}.` : '',
    r.image !== undefined ? "Commands run in the repository's own image: its system (its /usr, /bin, /lib, /etc), not this host's." : '',
    r.test !== null ? `The repository's test command is \`${r.test}\`; ctxagent runs it after you finish.` : '',
  ]
    .filter((l) => l !== '')
    .join(' ')
}

/**
 * The environment's test command, run by ctxagent after the agent finished: in the
 * sandbox, offline, bounded in time and output; recorded as state.json `test_run`.
 */
export async function testStep(run: RunEnv, handle: TaskHandle, hidden: readonly string[], log: RunLog, signal?: AbortSignal): Promise<TestRun | null> {
  const command = handle.state.environment?.status === 'ready' ? handle.state.environment.test : null
  if (command === null || command === undefined) return null
  const planned = planSandbox(run.config.tools, hidden, run.settings.workspace)
  if (!planned.ok || planned.plan.kind !== 'bwrap') return null
  let plan = planned.plan
  const image = handle.state.environment?.image
  if (image !== undefined) {
    const got = await taskImage(run, image, hidden)
    if (!got.ok) {
      const record: TestRun = { command, exit_code: null, timed_out: false, duration_ms: 0, tail: got.error, at: new Date().toISOString() }
      await handle.update({ test_run: record })
      log.warn(`test command \`${command}\` not run: ${got.error}`)
      return record
    }
    plan = { ...plan, root: got.root }
  }
  // A stop ends the test command (killed: exit_code null) and the completed task's ending goes on; it does not wait out the 10 minutes.
  const result = await runScript({
    plan,
    workspace: run.settings.workspace,
    script: command,
    hosts: null,
    timeoutMs: TEST_TIMEOUT_MS,
    log: null,
    ...(signal !== undefined ? { signal } : {}),
  })
  const record: TestRun = {
    command,
    exit_code: result.code,
    timed_out: result.timedOut,
    duration_ms: result.ms,
    tail: result.error !== null ? result.error : result.tail.slice(-2000),
    at: new Date().toISOString(),
  }
  await handle.update({ test_run: record })
  log.info(`test command \`${command}\`: ${result.timedOut ? 'timed out' : result.stopped ? 'ended by the stop' : `exit ${result.code ?? 'unknown'}`}`)
  return record
}
