import type { ToolSpec } from '../llm/client.js'
import type { SandboxPlan } from './sandbox.js'
import type { ConnectionRecord } from './sandbox/egress-proxy.js'

/** What a tool may use while it runs: the workspace, the stop signal, and the task's memory of reads. */
export interface ToolContext {
  /** The workspace, already resolved with realpath: the only directory tools may touch. */
  readonly workspace: string
  /**
   * Real paths no tool may read, write or list, whatever the workspace: the task tree and
   * ctxagent's config file. Checked against where each opened directory really is.
   */
  readonly hidden: readonly string[]
  /** How run_command runs: inside bubblewrap, or (only when the operator said so) without a sandbox. */
  readonly sandbox: SandboxPlan
  /** Aborted when the task stops (SIGINT/SIGTERM, pause): a tool kills what it started and returns. */
  readonly signal: AbortSignal
  /** Files this task has read, for edit_file/write_file's read-before-write rule. */
  readonly reads: ReadTracker
  /** run_command's default timeout (config tools.command_timeout_seconds). */
  readonly commandTimeoutSeconds: number
  /** The task's blobs (long tool outputs stored once), for `inspect`: a blob's text by id, null when the task has none such. */
  readonly blobs?: { read(id: string): string | null }
  /** Told of each connection a command made through the egress proxy (network: proxy), for the task's tools.jsonl. */
  readonly network?: (record: ConnectionRecord) => void
  /** Told when a command's process group starts and ends (the task's lock names the running ones). */
  readonly commands?: {
    started(pgid: number): void
    ended(pgid: number): void
  }
}

/** What a file looked like when the task last read it (or wrote it). */
export interface ReadStamp {
  mtimeMs: number
  size: number
}

/**
 * The files a task has read, by workspace-relative path. Persisted in state.json by
 * the agent loop (`read_files`), so a resumed task can still edit what it read before
 * the pause.
 */
export interface ReadTracker {
  get(path: string): ReadStamp | undefined
  set(path: string, stamp: ReadStamp): void
}

export interface ToolOutcome {
  /** The text the LLM sees (already capped by the tool). */
  output: string
  status: 'success' | 'error'
  /** One line saying what went wrong, for tools.jsonl; null on success. */
  error: string | null
  /** Set by `finish`: the task ends after this call. */
  finish?: { summary: string; status: 'done' | 'blocked' }
  /** The call was cut short by the stop signal. */
  aborted?: boolean
}

/** One parameter of a built-in tool (src/tools/schema.ts): a flat JSON value, as every built-in tool's arguments are. `T` is its value, `O` whether it may be left out with no default. */
export interface Param<T, O extends boolean = boolean> {
  readonly kind: 'string' | 'integer' | 'boolean'
  readonly description: string
  readonly optional: O
  readonly default?: T
  readonly minimum?: number
  readonly maximum?: number
  readonly values?: readonly string[]
}

export type Shape = Record<string, Param<unknown>>

/** Arguments that fit a tool's schema (coerced, defaults applied), or one line saying what does not. */
export type Validation = { ok: true; args: Record<string, unknown> } | { ok: false; error: string }

/** One tool the LLM can call. */
export interface Tool {
  readonly name: string
  /** The OpenAI tool definition (JSON Schema parameters). */
  readonly spec: ToolSpec
  /**
   * Validates (and coerces, e.g. "5" → 5) arguments that were already parsed from
   * JSON; returns an error text naming the bad field and the schema when they do not fit.
   */
  validate(args: unknown): Promise<Validation>
  run(args: Record<string, unknown>, ctx: ToolContext): Promise<ToolOutcome>
}
