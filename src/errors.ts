/**
 * The one error hierarchy. Core code throws these; only src/cli.ts turns them into
 * an exit code and the one-line `ctxagent: <message> (<hint>)` on stderr (docs/contract.md §9).
 */
export class CtxError extends Error {
  readonly exitCode: number
  readonly hint: string | undefined
  /** Already written to stderr in the command's own format (run's JSON log): cli.ts only exits with the code. */
  readonly logged: boolean

  constructor(message: string, options: { exitCode?: number; hint?: string; cause?: unknown; logged?: boolean } = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause })
    this.name = new.target.name
    this.exitCode = options.exitCode ?? 1
    this.hint = options.hint
    this.logged = options.logged === true
  }
}

/** `run`'s task completed, but the delivery it was started with did not happen (refused or failed): docs/contract.md §9. */
export const UNDELIVERED_EXIT = 6
/** `run`'s task ended `setup_failed`: its repository's environment could not be prepared, no LLM request made (docs/contract.md §9, §16.2); `env prepare`'s setup failed. */
export const SETUP_FAILED_EXIT = 7

/** Bad flags, bad task id, bad config: exit 2. Nothing on disk was touched. */
export class UsageError extends CtxError {
  constructor(message: string, hint?: string) {
    super(message, { exitCode: 2, ...(hint === undefined ? {} : { hint }) })
  }
}

/** No such task (or file): exit 3. */
export class NotFoundError extends CtxError {
  constructor(message: string, hint?: string) {
    super(message, { exitCode: 3, ...(hint === undefined ? {} : { hint }) })
  }
}

/** A live process holds the lock: exit 4. */
export class LockedError extends CtxError {
  constructor(message: string, hint?: string) {
    super(message, { exitCode: 4, ...(hint === undefined ? {} : { hint }) })
  }
}

/** Two processes resumed one task and this one lost: one line, exit 4. */
export function resumeRaceLost(uuid: string): LockedError {
  return new LockedError(
    `task ${uuid} was taken by another process while this one resumed it`,
    `see ctxagent view ${uuid.slice(0, 8)}; only one process runs a task`,
  )
}

/** The LLM server failed or could not be reached: exit 1. */
/**
 * A failure of the LLM side that may pass by itself (docs/contract.md §14.4): the server unreachable,
 * answering 5xx or 429 after the client's retries, or not answering in time.
 */
export type LlmFailure = 'unreachable' | 'server_error' | 'rate_limited' | 'timeout'

export class ProviderError extends CtxError {
  /** Set when the failure may pass by itself (a fleet runs the task again later); null when it will not (a refused key, a bad model name). */
  readonly failure: LlmFailure | null
  /** A usage limit beyond a turn's wait (a 429 or 529 with a far reset): when it lifts; else null. */
  readonly limitedUntil: Date | null
  constructor(message: string, hint?: string, cause?: unknown, failure: LlmFailure | null = null, limitedUntil: Date | null = null) {
    super(message, { exitCode: 1, ...(hint === undefined ? {} : { hint }), cause })
    this.failure = failure
    this.limitedUntil = limitedUntil
  }
}

/** A record that must be readable is not (e.g. metadata.json is not JSON): exit 1. */
export class CorruptRecordError extends CtxError {
  constructor(message: string, hint?: string) {
    super(message, { exitCode: 1, ...(hint === undefined ? {} : { hint }) })
  }
}

export function isErrno(err: unknown, code: string): err is NodeJS.ErrnoException {
  return err instanceof Error && (err as NodeJS.ErrnoException).code === code
}
