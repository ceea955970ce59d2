import { watch } from 'node:fs'
import type { FSWatcher } from 'node:fs'
import { join } from 'node:path'
import { readInbox } from '../storage/task/inbox.js'
import type { InboxRecord } from '../storage/task/inbox.js'
import { FILES } from '../storage/fs/layout.js'
import type { ChatSession } from '../storage/task/state.js'
import type { TaskHandle } from '../storage/task/handle.js'
import type { Agent } from './turn.js'
import type { Ending } from './ending.js'
import type { RunLog } from './log.js'
import type { StopController } from './stop.js'

type Message = Extract<InboxRecord, { kind: 'message' }>

export interface ChatSettings {
  /** How often the inbox is read when no file-watch event comes (network filesystems send none). */
  pollMs: number
  /** Idle this long, the session ends by itself. */
  softTimeoutMs: number
}

/**
 * A keep-alive chat task (docs/contract.md §6): answers every unread inbox message in
 * order, each as one user message carrying its `inbox_id`, then waits in the same
 * process for the next (a file watch on inbox.jsonl plus a poll), handling control
 * requests while it waits. The session goes active → terminating → ended: on
 * `chat --end`, or idle for the soft timeout. The inbox position is saved per message,
 * so none is answered twice or skipped, across pauses and crashes too.
 */
export class ChatLoop {
  private lastActivity: number

  constructor(
    private readonly agent: Agent,
    private readonly handle: TaskHandle,
    private readonly stop: StopController,
    private readonly log: RunLog,
    private readonly settings: ChatSettings,
  ) {
    const last = Date.parse(handle.state.session?.last_activity_at ?? '')
    this.lastActivity = Number.isNaN(last) ? Date.now() : Math.max(last, Date.now() - settings.softTimeoutMs / 2)
  }

  run(): Promise<Ending> {
    return this.agent.guarded(async () => {
      // max_turns is per message: a resumed session's pending message gets a fresh budget.
      this.agent.resetTurnBudget()
      await this.setSession('active')
      // A resumed session whose last message still waits for its answer gets it first.
      if (this.unanswered()) {
        const ending = await this.answerPending()
        if (ending) return this.closing(ending)
      }
      for (;;) {
        const next = await this.next()
        if (next.kind !== 'message') return this.closing(next)
        const ending = await this.answer(next)
        if (ending) return this.closing(ending)
      }
    })
  }

  /**
   * A session-wide budget (max_tokens, --timeout) ends the session: every message still
   * waiting is answered with a note saying so, so no sender waits for an answer that
   * will never come. The session ends as `timeout`, as any task whose budget ran out.
   */
  private async closing(ending: Ending): Promise<Ending> {
    if (ending.kind !== 'timeout') return ending
    const note = `[ctxagent: not answered: the session ended because its budget ran out (${ending.reason}).]`
    if (this.unanswered()) this.handle.addMessage({ role: 'assistant', content: note })
    const { records, ends } = readInbox(this.handle.dir, this.agent.requests.position)
    const answered = new Set(
      this.handle.messages
        .recent()
        .map((m) => m.inbox_id)
        .filter((id) => id !== undefined),
    )
    let notes = 0
    for (const [i, record] of records.entries()) {
      this.agent.requests.position = ends[i] as number
      if (record.kind !== 'message' || record.visible === false || answered.has(record.id)) continue
      this.handle.addMessage({ role: 'user', content: record.content, inbox_id: record.id })
      this.handle.addMessage({ role: 'assistant', content: note })
      notes++
    }
    if (notes > 0) this.log.warn(`chat: the session's budget ran out; ${notes} waiting message(s) answered with a note`)
    return ending
  }

  /** The next message to answer, or why the session ends; waits while there is none. */
  private async next(): Promise<Message | Ending> {
    const answered = new Set(
      this.handle.messages
        .recent()
        .map((m) => m.inbox_id)
        .filter((id) => id !== undefined),
    )
    for (;;) {
      const early = this.agent.early()
      if (early) return early
      const { records, ends, offset, tooLong } = readInbox(this.handle.dir, this.agent.requests.position)
      this.agent.requests.noteReplies(records)
      if (tooLong > 0) this.log.warn(`chat: refused ${tooLong} inbox line(s) over 1 MiB: not answered`)
      for (const [i, record] of records.entries()) {
        const end = ends[i] as number
        if (record.kind === 'control') {
          this.agent.requests.position = end
          if (record.action === 'end') {
            this.agent.requests.reply(record, true, 'ending the session')
            this.log.info(`chat: end requested by ${record.sender}`)
            return this.terminate()
          }
          const ending = await this.agent.requests.control(record)
          if (ending) return ending
          continue
        }
        if (record.kind !== 'message' || answered.has(record.id)) {
          this.agent.requests.position = end
          continue
        }
        if (record.visible === false) {
          // Recorded (the session marker), never sent to the LLM.
          this.handle.addMessage({ role: 'user', content: record.content, visible: false, inbox_id: record.id })
          this.agent.requests.position = end
          continue
        }
        this.agent.requests.position = end
        return record
      }
      this.agent.requests.position = offset
      // Waiting for a message is progress too: an idle session is not a wedged one.
      this.handle.markProgress()
      if (Date.now() - this.lastActivity >= this.settings.softTimeoutMs) {
        this.log.info(`chat: idle for ${Math.round(this.settings.softTimeoutMs / 60_000)} min; ending the session`)
        return this.terminate()
      }
      await this.waitForInbox()
    }
  }

  /** Records the message, then runs turns until the assistant answers without a tool call. */
  private async answer(message: Message): Promise<Ending | null> {
    this.agent.resetTurnBudget()
    this.handle.addMessage({ role: 'user', content: message.content, inbox_id: message.id })
    this.log.info(`chat: message ${message.id} from ${message.sender}`)
    return this.answerPending()
  }

  /** The conversation ends on a chat message or a tool result: the assistant still owes an answer. */
  private unanswered(): boolean {
    const last = [...this.handle.messages.recent()].reverse().find((m) => m.visible !== false)
    if (last === undefined) return false
    return last.role === 'tool' || (last.role === 'user' && last.inbox_id !== undefined)
  }

  private async answerPending(): Promise<Ending | null> {
    for (;;) {
      if (this.agent.turnBudgetSpent()) return this.outOfTurns()
      const early = this.agent.early()
      if (early) return early
      const ending = await this.agent.step()
      if (ending === null) continue
      if (ending.kind !== 'completed') return ending
      this.lastActivity = Date.now()
      await this.setSession('active')
      return null
    }
  }

  /**
   * A message that used its whole max_turns budget without an answer: ctxagent answers
   * it with a note (the model sees the note too), and the session goes on with the next.
   */
  private async outOfTurns(): Promise<null> {
    const turns = this.agent.progress().turns
    this.handle.addMessage({
      role: 'assistant',
      content: `[ctxagent: this message used its whole budget of turns (run.max_turns per chat message) without a final answer; the work so far is above. Send a narrower request, or ask to continue.]`,
    })
    this.log.warn(`chat: a message used its whole max_turns budget (turn ${turns}); answered with a note, the session goes on`)
    this.agent.resetTurnBudget()
    this.lastActivity = Date.now()
    await this.setSession('active')
    return null
  }

  /** active → terminating; the caller completes the task, and the session ends with it. */
  private async terminate(): Promise<Ending> {
    await this.setSession('terminating')
    const last = [...this.handle.messages.recent()].reverse().find((m) => m.role === 'assistant' && !m.tool_calls?.length)
    return { kind: 'completed', answer: last?.content ?? '', finishStatus: null, sessionEnded: true }
  }

  private async setSession(state: ChatSession['state']): Promise<void> {
    await this.handle.update({
      ...this.agent.progress(),
      session: { state, last_activity_at: new Date(this.lastActivity).toISOString() },
      last_activity: `chat ${state}`,
    })
  }

  /**
   * Sleeps until inbox.jsonl changes (a file watch), the poll interval passes (for
   * filesystems that send no events), the soft timeout comes, or the task is stopped.
   * The heartbeat goes on meanwhile (its own timer).
   */
  private waitForInbox(): Promise<void> {
    const idleLeft = this.settings.softTimeoutMs - (Date.now() - this.lastActivity)
    return new Promise((resolve) => {
      let watcher: FSWatcher | null = null
      let timer: NodeJS.Timeout | null = null
      const done = () => {
        watcher?.close()
        if (timer) clearTimeout(timer)
        this.stop.signal.removeEventListener('abort', done)
        resolve()
      }
      try {
        watcher = watch(join(this.handle.dir, FILES.inbox), done)
        watcher.on('error', done)
      } catch {
        // No inbox yet, or no watch support: the poll still comes.
      }
      timer = setTimeout(done, Math.max(10, Math.min(this.settings.pollMs, idleLeft)))
      this.stop.signal.addEventListener('abort', done, { once: true })
    })
  }

  /** Used by settle: the session is over with the task. */
  static ended(now: Date): ChatSession {
    return { state: 'ended', last_activity_at: now.toISOString() }
  }
}
