import { existsSync, renameSync } from 'node:fs'
import { join } from 'node:path'
import { CtxError, isErrno } from '../../errors.js'
import { taskDiskUse } from '../fs/disk.js'
import type { DiskUse } from '../fs/disk.js'
import { explainSystemError } from '../../system-errors.js'
import { writeFileAtomic } from '../fs/files.js'
import { tailPlainSync } from '../format/jsonl.js'
import { FILES } from '../fs/layout.js'
import type { Location } from '../fs/layout.js'
import { LockLostError, type TaskLock } from '../lock/lock.js'
import { maskText } from '../format/mask.js'
import { MessageStore } from './message-store.js'
import type { NewMessage } from './message-store.js'
import { readMetadata } from './metadata.js'
import type { TaskMetadata } from './metadata.js'
import { toWindowMessage } from '../format/records.js'
import type { NetworkRecord, SummaryRecord, ToolRecord, WindowMessage } from '../format/records.js'
import { initialState, readState, updateState, writeOwnedState, writeOwnedStateAsync } from './state.js'
import type { PausedBy, Status, TaskState } from './state.js'
import { PlanningStore, SummaryStore, ToolStore } from './stores.js'
import type { TaskEnv } from './env.js'
import { indexTask } from './row.js'
import { rememberEstimate, windowTokens } from '../format/tokens.js'
import { addCalls, outcomeLabel, ownerTally, toolLabeler } from './tool-tally.js'
import type { ToolTally } from './tool-tally.js'

/** A running task's index row is rewritten at most this often by state writes (status changes at once). */
const INDEX_EVERY_MS = 1_000

export type Hook = (handle: TaskHandle) => void | Promise<void>

/**
 * A task this process owns: it holds the `.lock`, keeps the heartbeat, and is the
 * only writer of the task's files. Every write first checks that the lock is still
 * ours, so an owner whose lock was taken over stops writing at once.
 */
export class TaskHandle {
  private lostError: LockLostError | null = null
  private windowCache: { messages: WindowMessage[]; tokens: number } | null = null
  /** The owner's state.json writes on their way (saveProgress): the one in flight, the newest waiting, the first error. */
  private writing: Promise<void> | null = null
  private queued: TaskState | null = null
  private writeError: unknown = null
  /** When the index last got this task's row (Date.now()). */
  private indexedAt = 0
  private timer: NodeJS.Timeout | null = null
  private stores: { messages: MessageStore; summaries: SummaryStore; tools: ToolStore; planning: PlanningStore } | null
  /** Tool calls by tool and outcome, counted as tools.jsonl gets them; written with the next state (tool-tally.ts). */
  private toolTally: ToolTally
  /** A tool name as a bounded label (tool-tally.ts): for /metrics, and for spans that carry no content. */
  readonly toolLabel: (name: string) => string
  private readonly completionHooks: Hook[] = []
  private readonly stopHooks: Hook[] = []

  private constructor(
    private readonly env: TaskEnv,
    readonly uuid: string,
    private dirPath: string,
    private readonly lock: TaskLock,
    readonly metadata: TaskMetadata,
    private stateCache: TaskState,
    private readonly onLost: (err: LockLostError) => void,
  ) {
    const options = {
      fsync: env.config.context.durability === 'fsync',
      now: env.now,
      memoryMessages: env.config.context.max_memory_messages,
    }
    this.stores = {
      messages: MessageStore.open(dirPath, options),
      summaries: SummaryStore.open(dirPath, options),
      tools: ToolStore.open(dirPath, options),
      planning: PlanningStore.open(dirPath, options),
    }
    this.toolLabel = toolLabeler(Object.keys(env.config.mcp.servers))
    this.toolTally = ownerTally(dirPath, stateCache, this.stores.tools.lastSeq, this.toolLabel)
    const every = env.config.locks.heartbeat_seconds * 1000
    this.timer = setInterval(() => void this.beat(), every)
    this.timer.unref()
  }

  get dir(): string {
    return this.dirPath
  }

  get state(): TaskState {
    return this.stateCache
  }

  /** Set when the lock was taken from us; every write throws it from then on. */
  get lost(): LockLostError | null {
    return this.lostError
  }

  get messages(): MessageStore {
    return this.owned().messages
  }

  onCompletion(hook: Hook): void {
    this.completionHooks.push(hook)
  }

  onStop(hook: Hook): void {
    this.stopHooks.push(hook)
  }

  addMessage(message: NewMessage) {
    const stored = this.owned().messages.add(message)
    if (stored.visible !== false && this.windowCache !== null) {
      const inWindow = toWindowMessage(stored)
      // The store estimated this very text: the request's planning need not scan it again.
      if (message.token_count === undefined) rememberEstimate(inWindow, stored.token_count)
      this.windowCache.messages.push(inWindow)
      this.windowCache.tokens += stored.token_count
    }
    return stored
  }

  /**
   * The window (what current.jsonl holds), kept in memory as the owner appends and
   * compacts: bounded by compaction, never the whole history (docs/contract.md §5). Read from
   * current.jsonl once, when the task was resumed.
   */
  window(): readonly WindowMessage[] {
    return this.loadWindow().messages
  }

  /** Estimated tokens of the window: deciding whether to compress reads nothing from disk. */
  windowTokens(): number {
    return this.loadWindow().tokens
  }

  private loadWindow(): { messages: WindowMessage[]; tokens: number } {
    if (this.windowCache === null) {
      this.owned()
      const path = join(this.dirPath, FILES.current)
      // The window is bounded by compaction, so reading it whole is fine; the reader skips a torn tail.
      const messages = existsSync(path) ? (tailPlainSync(path, Number.POSITIVE_INFINITY).records as unknown as WindowMessage[]) : []
      this.windowCache = { messages, tokens: windowTokens(messages) }
    }
    return this.windowCache
  }

  addTool(record: Omit<ToolRecord, 'seq' | 'timestamp'>): ToolRecord {
    const stored = this.owned().tools.add(record)
    this.toolTally = addCalls(this.toolTally, this.toolLabel(record.tool_name), outcomeLabel(record.status))
    return stored
  }

  /** A connection through the egress proxy: in tools.jsonl, not a call (no count, no tally). */
  addNetwork(record: Omit<NetworkRecord, 'seq' | 'timestamp' | 'kind' | 'tool_name'>): NetworkRecord {
    return this.owned().tools.addNetwork(record)
  }

  addSummary(record: Omit<SummaryRecord, 'summary_id'>): SummaryRecord {
    return this.owned().summaries.add(record)
  }

  addPlan(planType: string, content: string) {
    return this.owned().planning.add(planType, content)
  }

  replaceCurrent(window: readonly WindowMessage[]): void {
    this.owned().messages.replaceCurrent(window)
    this.windowCache = { messages: [...window], tokens: windowTokens(window) }
  }

  /** Changes state.json (and the heartbeat, and tasks.db). */
  async update(change: Partial<TaskState> | ((state: TaskState) => Partial<TaskState>)): Promise<TaskState> {
    // A queued state is not written: this one holds all it held.
    this.queued = null
    await this.settleState()
    const next = this.nextState(change)
    // The lock is ours: no other process writes state.json meanwhile (see writeOwnedState).
    writeOwnedState(this.dirPath, next, this.syncDir)
    return this.changed(next)
  }

  /**
   * A turn's counters (docs/contract.md §12.2 step 6), written while the next request is on its way:
   * the same temp + fsync + rename, in the thread pool instead of on the turn's path. The
   * state is the new one at once (handle.state, tasks.db). While a write is still on its
   * way (a slow disk: its fsync outlasts a turn) the turn does not wait: the newest state
   * is written when it lands, the ones between are skipped (each is whole, and the next
   * holds all they held). Every other write of state.json first waits for these and
   * throws their error (a full disk, a lost lock). A crash before one lands leaves
   * state.json as an earlier turn left it: whole, counters behind (messages.jsonl is the
   * truth; inbox offsets and status changes are written at once, by update).
   */
  async saveProgress(change: Partial<TaskState>): Promise<TaskState> {
    this.throwWriteError()
    const next = this.changed(this.nextState(change))
    if (this.writing !== null) this.queued = next
    else this.writing = this.writeBehind(next)
    return next
  }

  /** Writes `first`, then whatever saveProgress queued meanwhile; never rejects (the error waits in writeError). */
  private async writeBehind(first: TaskState): Promise<void> {
    const dir = this.dirPath
    // Checked again just before each rename: a lock taken meanwhile stops the write.
    const stillOurs = () => {
      if (!this.lock.isStillOurs()) throw new LockLostError(dir, null)
    }
    for (let state: TaskState | null = first; state !== null; state = this.queued, this.queued = null) {
      try {
        await writeOwnedStateAsync(dir, state, this.syncDir, stillOurs)
      } catch (err) {
        this.writeError ??= err
        this.queued = null
        break
      }
    }
    this.writing = null
  }

  /** Waits for the state writes on their way (saveProgress), throwing their error if one failed. */
  async settleState(): Promise<void> {
    while (this.writing !== null) await this.writing
    this.throwWriteError()
  }

  private throwWriteError(): void {
    const err = this.writeError
    if (err === null) return
    this.writeError = null
    throw err
  }

  private get syncDir(): boolean {
    return this.env.config.context.durability === 'fsync'
  }

  private nextState(change: Partial<TaskState> | ((state: TaskState) => Partial<TaskState>)): TaskState {
    // Still ours? owned() compares the lock file's identity (inode, mtime, size) with the
    // one this process last wrote: a takeover renames a new file in, a rewrite changes the
    // mtime. Neither a read nor a rewrite of the lock: the heartbeat timer keeps it fresh.
    const stores = this.owned()
    const current = this.stateCache
    return {
      ...current,
      ...(typeof change === 'function' ? change(current) : change),
      message_count: stores.messages.lastSeq,
      tool_call_count: stores.tools.lastSeq,
      tool_calls: this.toolTally,
      compression_count: stores.summaries.lastId,
      updated_at: this.env.now().toISOString(),
    }
  }

  private changed(next: TaskState): TaskState {
    const before = this.stateCache.status
    this.stateCache = next
    // The index follows a running task's counters at most once a second (a status change at once):
    // a turn writes state.json twice, and reindex or the next write repairs what a crash left behind.
    const now = Date.now()
    if (this.stateCache.status !== before || now - this.indexedAt >= INDEX_EVERY_MS) {
      this.indexedAt = now
      this.index('running')
    }
    return this.stateCache
  }

  setStatus(status: Status, activity?: string): Promise<TaskState> {
    return this.update(activity === undefined ? { status } : { status, last_activity: activity })
  }

  /**
   * Completion (docs/contract.md §3): status completing with final counters, hooks, final
   * summary, lock removed, directory renamed to completed/, then status completed.
   * A crash after the rename leaves `completing` in completed/, which the next scan
   * finishes.
   */
  async complete(finalSummary: string | null = null): Promise<void> {
    await this.setStatus('completing', 'completing')
    for (const hook of this.completionHooks) await hook(this)
    if (finalSummary !== null) writeFileAtomic(join(this.dirPath, FILES.finalSummary), maskText(finalSummary))
    await this.finish('completed', { completed_at: this.env.now().toISOString() }, { status: 'completed' })
  }

  /** Stop on purpose: hooks, status paused (and who paused it), lock removed, moved to paused/. */
  async pause(by: PausedBy | null = null): Promise<void> {
    for (const hook of this.stopHooks) await hook(this)
    await this.finish('paused', { status: 'paused', last_activity: 'paused', paused_by: by })
  }

  /** Failure: status failed (or timeout) with the error, lock removed, moved to completed/. */
  async fail(error: string, status: 'failed' | 'timeout' | 'setup_failed' = 'failed'): Promise<void> {
    await this.finish('completed', { status, error: maskText(error), completed_at: this.env.now().toISOString() })
  }

  /**
   * Pause for when the usual pause cannot write (a full disk): stop owning the task,
   * remove the lock (which frees room), then record `paused` if that now fits, and
   * move the directory to paused/ (a rename needs no room). Records stay as last written.
   */
  async abandon(error: string): Promise<void> {
    await this.settleState().catch(() => undefined)
    this.stopTimer()
    this.closeStores()
    await this.lock.release()
    await updateState(this.dirPath, () => ({ status: 'paused', last_activity: 'paused', paused_by: 'disk', error: maskText(error) }), this.env.now()).catch(
      () => undefined,
    )
    const target = this.env.layout.taskDir('paused', this.uuid)
    renameSync(this.dirPath, target)
    this.dirPath = target
  }

  private async finish(to: Location, change: Partial<TaskState>, afterMove?: Partial<TaskState>): Promise<void> {
    await this.update(change)
    this.stopTimer()
    this.closeStores()
    await this.lock.release()
    const target = this.env.layout.taskDir(to, this.uuid)
    renameSync(this.dirPath, target)
    this.dirPath = target
    if (afterMove) this.stateCache = await updateState(target, () => afterMove, this.env.now())
    this.index(to, taskDiskUse(target))
  }

  private owned() {
    if (this.lostError === null && this.stores !== null && !this.lock.isStillOurs()) {
      this.markLost(new LockLostError(this.dirPath, null))
    }
    if (this.lostError) throw this.lostError
    if (this.stores === null) throw new CtxError(`task ${this.uuid} is no longer open in this process`)
    return this.stores
  }

  /**
   * A command (run_command) started or ended in its own process group: the lock names
   * the groups still running, so that whoever takes over after this process dies kills them.
   */
  async commandRunning(pgid: number, running: boolean): Promise<void> {
    await this.rewriteLock(() => this.lock.trackCommand(pgid, running))
  }

  /** The loop moved on (a turn done, a chat poll): the lock says so with its next heartbeat, for watch-locks. */
  markProgress(): void {
    this.lock.markProgress()
  }

  /** Process groups of a dead previous owner's commands that taking its lock killed. */
  get stoppedCommands(): readonly number[] {
    return this.lock.stoppedCommands
  }

  private async beat(strict = false): Promise<void> {
    await this.rewriteLock(() => this.lock.heartbeat(), strict)
  }

  private async rewriteLock(write: () => Promise<void>, strict = false): Promise<void> {
    if (this.lostError) {
      if (strict) throw this.lostError
      return
    }
    try {
      await write()
    } catch (caught) {
      // The directory moved away under us (unlock --force, a reaper): the lock is gone with it.
      const err = isErrno(caught, 'ENOENT') ? new LockLostError(this.dirPath, null) : caught
      if (!(err instanceof LockLostError)) {
        this.env.warn(`heartbeat of task ${this.uuid} failed: ${(explainSystemError(err, this.env.layout.base) ?? (err as Error)).message}`)
        if (strict) throw err
        return
      }
      this.markLost(err)
      if (strict) throw err
    }
  }

  private markLost(err: LockLostError): void {
    this.lostError = err
    this.stopTimer()
    this.closeStores()
    this.onLost(err)
  }

  private stopTimer(): void {
    if (this.timer) clearInterval(this.timer)
    this.timer = null
  }

  private closeStores(): void {
    if (this.stores === null) return
    for (const store of Object.values(this.stores)) store.close()
    this.stores = null
  }

  private index(location: Location, disk: DiskUse | null = null): void {
    indexTask(
      this.env,
      this.metadata,
      this.stateCache,
      location,
      { messages: this.stateCache.message_count ?? 0, summaries: this.stateCache.compression_count, tools: this.stateCache.tool_call_count },
      disk,
    )
  }

  /** @internal used by createTask / resumeTask */
  static async open(env: TaskEnv, uuid: string, dir: string, lock: TaskLock, onLost?: (err: LockLostError) => void): Promise<TaskHandle> {
    const metadata = readMetadata(dir)
    const state = readState(dir) ?? initialState(env.now())
    return new TaskHandle(env, uuid, dir, lock, metadata, state, onLost ?? (() => undefined))
  }
}
