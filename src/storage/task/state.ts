import { join } from 'node:path'
import { CtxError, isErrno } from '../../errors.js'
import type { LlmFailure } from '../../errors.js'
import { parseJsonObject, readSmallFile, writeFileAtomic, writeFileAtomicAsync, writeJsonAtomic } from '../fs/files.js'
import { FILES } from '../fs/layout.js'
import type { RequestsUsage } from '../format/records.js'
import { cleanTally } from './tool-tally.js'
import { cleanCounts } from './state-counts.js'
import type { ToolTally } from './tool-tally.js'
import { grouped } from '../../text.js'

export const STATUSES = ['initializing', 'processing', 'compressing', 'completing', 'completed', 'failed', 'timeout', 'paused', 'setup_failed'] as const
export type Status = (typeof STATUSES)[number]
/** Who paused a task (state.paused_by): a signal to its agent (SIGINT/SIGTERM, a stopping worker), an operator (`pause`), the LLM failing, a full disk, or a reaper (fleet.recovery: resume). */
export type PausedBy = 'signal' | 'operator' | 'llm' | 'disk' | 'reaper' | 'budget' | 'rate-limit'
/** The cost cap a budget pause names (state.budget_cap). */
export type BudgetCap = 'task' | 'user-daily' | 'user-monthly' | 'fleet-daily'
export const FINAL_STATUSES: readonly Status[] = ['completed', 'failed', 'timeout', 'setup_failed']

export interface ChatSession {
  state: 'active' | 'terminating' | 'ended'
  last_activity_at: string
}

export interface TaskState {
  status: Status
  /** Null when a state.json from elsewhere does not say (never an invented date). */
  started_at: string | null
  updated_at: string
  completed_at: string | null
  llm_call_count: number
  tool_call_count: number
  /** tool_call_count by tool and outcome (tool-tally.ts), for /metrics. Absent in older files. */
  tool_calls?: ToolTally
  total_tokens_used: number
  /** total_tokens_used split (docs/contract.md §2.2, beyond the original designs): prompt and completion tokens, and the prompt tokens served from the provider's cache. Absent in older files. */
  prompt_tokens?: number
  completion_tokens?: number
  cached_tokens?: number
  /** Prompt tokens written to the provider's cache (Anthropic bills them at 1.25×), where it reports them. */
  cache_write_tokens?: number
  /** What the final summary's requests cost, apart from the turns' split above (absent until a task completes with an LLM summary). */
  final_summary_tokens?: RequestsUsage
  /** What the compactions' summary requests cost, summed (absent until an LLM compaction by the owner). */
  compaction_tokens?: RequestsUsage
  current_context_tokens: number
  compression_count: number
  /** Lines in messages.jsonl, kept by ctxagent so that indexing needs no scan (absent in older files). */
  message_count?: number
  last_activity: string | null
  error: string | null
  /** last_comment_id: the highest comment id seen (a high-water mark: GitLab has no `since`, and the id list is capped). */
  comment_detection: { last_comment_ids: string[]; last_check_timestamp: string | null; status_comment_id?: string | null; last_comment_id?: number | null }
  session?: ChatSession
  /** Written by `run` (docs/contract.md §12): agent turns so far, for the max_turns budget. */
  turns?: number
  /** Milliseconds `run` has worked on the task (paused time excluded), for the timeout budget. */
  elapsed_ms?: number
  /** Bytes of inbox.jsonl the owner has read: every line before it was handled once. */
  inbox_offset?: number
  /** Files the task read (workspace-relative path → mtime and size), so edits stay allowed across a resume. */
  read_files?: Record<string, { mtimeMs: number; size: number }>
  /** The assistant's final answer, or finish's summary. */
  final_answer?: string | null
  /** Who paused the task, written with status paused (absent in older files, and kept after a resume until the next pause). */
  paused_by?: PausedBy | null
  /** With paused_by llm: how the LLM side failed when it may pass by itself (unreachable, server_error, rate_limited, timeout), else null; a fleet retries the former (docs/contract.md §14.4). */
  llm_failure?: LlmFailure | null
  /** finish's status: done, or blocked (the task could not be done). */
  finish_status?: 'done' | 'blocked' | null
  /** The change's delivery, written when it ends (docs/delivery.md#what-is-recorded); absent: none was asked for or it has not ended. */
  delivery?: Delivery
  /** The commit delivery made, written before it left delivery's staging directory: a delivery after a crash reuses exactly it (docs/delivery.md#a-crash-during-delivery). */
  delivery_commit?: string
  /** With paused_by budget or rate-limit: when the task may go on by itself (a cap's window resets, a usage limit lifts), ISO 8601; else null. */
  resume_at?: string | null
  /** With paused_by budget: the cap the next request would have passed. */
  budget_cap?: BudgetCap | null
  /** The repository's environment as prepared at start (docs/contract.md §16.3); absent: it has none. */
  environment?: TaskEnvironment
  /** The environment's test command as ctxagent ran it after the agent (docs/contract.md §16.4). */
  test_run?: TestRun
  /** The project's instruction files the agent was given (docs/contract.md §16.5); absent: the repository has none. */
  instructions?: TaskInstructions
  /** The commit the task's trusted files are read from, found at its start before the agent ran (docs/contract.md §16.5): nested AGENTS.md files are read there. */
  trusted_base?: { commit: string; ref: string }
}

/** state.json `instructions` (docs/contract.md §16.5). */
export interface TaskInstructions {
  /** `commit`: read at the trusted base's commit; `workspace`: the workspace's own file (not a git repository). */
  source: 'commit' | 'workspace'
  /** The trusted base as named in the task's records (`origin/HEAD at 0123456789ab`). */
  base: string
  files: InstructionFile[]
  /** Files found but not read (a link, larger than the reading limit), with why. */
  refused: string[]
}

export interface InstructionFile {
  path: string
  /** The file's whole size. */
  bytes: number
  /** Its git blob id at the commit, or `sha256:<hex>` of a workspace's own file. */
  id: string
  /** True when it was cut at the bound (docs/environments.md#project-instructions). */
  truncated: boolean
}

/** state.json `environment` (docs/contract.md §16.3). */
export interface TaskEnvironment {
  /** stopped: a stop (SIGINT, SIGTERM, a pause) came during setup or maintenance; the task paused, its resume prepares again. */
  status: 'ready' | 'setup_failed' | 'stopped'
  file: string | null
  operator: string | null
  base: string
  cache: 'hit' | 'miss' | 'failed' | 'none'
  setup_seconds: number | null
  restored: string[]
  kept: string[]
  test: string | null
  error: string | null
  tail: string | null
  /** The environment's image, when it has one (docs/contract.md §16.6). */
  image?: ImageRecord
}

/** state.json `environment.image`: what the sandbox's system was. */
export interface ImageRecord {
  /** The environment's `image` as given. */
  source: string
  kind: 'directory' | 'oci' | 'docker-save'
  /** `sha256:<hex>`: the manifest's (OCI), docker's manifest and config's; null for a directory. */
  digest: string | null
  /** `miss`: this task unpacked it; `hit`: it was in the cache; `none`: a directory, used where it is. */
  cache: 'hit' | 'miss' | 'none'
}

/** state.json `test_run` (docs/contract.md §16.4). */
export interface TestRun {
  command: string
  exit_code: number | null
  timed_out: boolean
  duration_ms: number
  /** The output's last characters, masked. */
  tail: string
  at: string
}

/** What delivery did: the branch and commit it made, whether it pushed, the PR/MR, or why nothing (or not all) was delivered. */
export interface Delivery {
  mode: 'branch' | 'pr'
  branch: string | null
  commit: string | null
  pushed: boolean
  pr: { number: number; url: string } | null
  refused: string | null
}

export function initialState(now: Date): TaskState {
  const iso = now.toISOString()
  return {
    status: 'initializing',
    started_at: iso,
    updated_at: iso,
    completed_at: null,
    llm_call_count: 0,
    tool_call_count: 0,
    tool_calls: {},
    total_tokens_used: 0,
    current_context_tokens: 0,
    compression_count: 0,
    message_count: 0,
    last_activity: null,
    error: null,
    comment_detection: { last_comment_ids: [], last_check_timestamp: null },
  }
}

/**
 * Past this, a state.json is not one (a device, a planted file). Above the 16 MB of
 * other records: an older version wrote final answers of any size, and such a task
 * must still be viewed, resumed, reaped and indexed (its answer is cut on reading).
 */
const MAX_STATE_FILE = 256 * 1024 * 1024
/** A final answer read from an older, unbounded state.json is cut to this (the whole is in messages.jsonl). */
const MAX_ANSWER_READ = 1_000_000

/**
 * A final answer as state.json keeps it: at most `max` characters, a longer one cut
 * with a note saying where the whole is.
 */
export function boundAnswer(answer: string, max: number): string {
  if (answer.length <= max) return answer
  return `${answer.slice(0, max)}\n[cut: the final answer is ${grouped(answer.length)} characters; the first ${grouped(max)} are kept here, the whole is in messages.jsonl]`
}

/** state.json of a task, or null when the task has none yet. */
export function readState(dir: string): TaskState | null {
  const path = join(dir, FILES.state)
  let text: string
  try {
    text = readSmallFile(path, MAX_STATE_FILE)
  } catch (err) {
    if (isErrno(err, 'ENOENT')) return null
    throw err
  }
  return parseState(text, path)
}

export function parseState(text: string, path: string): TaskState {
  return normalizeState(parseJsonObject(text, path, 'restore it, or remove it and run ctxagent reindex'))
}

/**
 * Whether a task's agent died (reaped by watch-locks or unlock): paused to be resumed
 * (recovery: resume), or failed (recovery: fail). Either way `run --resume` continues it
 * from its last recorded message (docs/running.md#recovery-on-one-host).
 */
export function diedState(state: TaskState | null): boolean {
  if (state === null) return false
  if (state.status === 'paused') return state.paused_by === 'reaper'
  return state.status === 'failed' && state.last_activity === 'reaped'
}

/** A task in completed/ that `run --resume` continues: one a budget stopped (timeout, with the budget raised), or one whose agent died. */
export function resumableFromCompleted(state: TaskState | null): boolean {
  return state?.status === 'timeout' || diedState(state)
}

/** Defaults under a state.json read from disk (made once: reindex normalizes thousands). */
const { message_count: _unknownCount, tool_calls: _unknownTally, ...STATE_DEFAULTS } = initialState(new Date(0))

/** What normalizeState changed in the counters of a state.json it read (state-counts.ts), for the reader to report. */
const repairs = new WeakMap<TaskState, string[]>()

/** The counters of `state` that were not whole numbers on disk, and what they became; empty for a sound file. */
export function stateRepairs(state: TaskState | null): readonly string[] {
  return state === null ? [] : (repairs.get(state) ?? [])
}

function normalizeState(raw: Record<string, unknown>): TaskState {
  const counts = { ...STATE_DEFAULTS, ...raw }
  const repaired = cleanCounts(counts)
  const merged = counts as unknown as TaskState
  if (repaired.length > 0) repairs.set(merged, repaired)
  if (!(STATUSES as readonly string[]).includes(merged.status)) merged.status = 'failed'
  // Not the epoch default: a start nobody recorded stays unknown (readers fall back to metadata's created_at).
  if (typeof raw.started_at !== 'string' || Number.isNaN(Date.parse(raw.started_at))) merged.started_at = null
  // Fresh, never the shared defaults' array: a caller may push to last_comment_ids.
  merged.comment_detection = { last_comment_ids: [], last_check_timestamp: null, ...(raw.comment_detection as object | undefined) }
  // Read small, written small: the next update of such a task brings its state.json back under every reader's cap.
  if (typeof merged.final_answer === 'string') merged.final_answer = boundAnswer(merged.final_answer, MAX_ANSWER_READ)
  // Bounded labels and whole counts, whoever wrote the file: the index sums them into /metrics.
  if (raw.tool_calls !== undefined) merged.tool_calls = cleanTally(raw.tool_calls)
  return merged
}

const STATE_LOCK_TIMEOUT_MS = 5_000

/**
 * Changes state.json under the short `.state.lock` (proper-lockfile, 5 s timeout):
 * read, apply `change`, stamp `updated_at`, write temp + fsync + rename. A reader
 * never sees half a file, and two writers never lose each other's change.
 */
export async function updateState(dir: string, change: (state: TaskState) => Partial<TaskState>, now: Date = new Date()): Promise<TaskState> {
  const release = await lockState(dir)
  try {
    const current = readState(dir) ?? initialState(now)
    const next: TaskState = { ...current, ...change(current), updated_at: now.toISOString() }
    writeJsonAtomic(join(dir, FILES.state), next)
    return next
  } finally {
    await release()
  }
}

/**
 * The owner's write of its state.json: the whole state it keeps in memory, temp +
 * fsync + rename, with no `.state.lock` and no read. While a task's `.lock` is held its
 * holder is the only writer of state.json (docs/contract.md §4: a reaper, `compress` and `unlock`
 * take the `.lock` first; everyone else only appends to inbox.jsonl), so there is no
 * other writer to exclude, and what is on disk is what the owner last wrote.
 * The directory is fsynced with context.durability: fsync (`syncDir`).
 */
export function writeOwnedState(dir: string, state: TaskState, syncDir: boolean): void {
  writeFileAtomic(join(dir, FILES.state), stateText(state), { syncDir })
}

/** writeOwnedState in the thread pool (see writeFileAtomicAsync): the owner's per-turn write, off the turn's path. */
export function writeOwnedStateAsync(dir: string, state: TaskState, syncDir: boolean, beforeRename: () => void): Promise<void> {
  return writeFileAtomicAsync(join(dir, FILES.state), stateText(state), { syncDir, beforeRename })
}

function stateText(state: TaskState): string {
  return `${JSON.stringify(state, null, 2)}\n`
}

/** Writes a whole state.json (task creation), under the same lock. */
export async function writeState(dir: string, state: TaskState): Promise<void> {
  const release = await lockState(dir)
  try {
    writeJsonAtomic(join(dir, FILES.state), state)
  } finally {
    await release()
  }
}

async function lockState(dir: string): Promise<() => Promise<void>> {
  // Loaded at the first change of a state.json, not by every command that reads tasks (docs/development.md#start-up).
  const { default: lockfile } = await import('proper-lockfile')
  try {
    return await lockfile.lock(dir, {
      lockfilePath: join(dir, FILES.stateLock),
      realpath: false,
      // A process killed inside the section leaves the lock behind: it is taken over after 2 s
      // (proper-lockfile's minimum), well within the 5 s that a writer waits.
      stale: 2_000,
      retries: { retries: STATE_LOCK_TIMEOUT_MS / 25, factor: 1, minTimeout: 25, maxTimeout: 25 },
      // The section is a few milliseconds long and its write is atomic, so a lock
      // "compromised" by a slow disk must not crash the process from a timer.
      onCompromised: () => undefined,
    })
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ELOCKED') {
      throw new CtxError(`state.json of ${dir} stayed locked for ${STATE_LOCK_TIMEOUT_MS / 1000}s`, {
        hint: `remove ${join(dir, FILES.stateLock)} if no ctxagent process is using the task`,
      })
    }
    throw err
  }
}
