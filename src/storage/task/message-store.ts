import { join } from 'node:path'
import { writeFileAtomic } from '../fs/files.js'
import { JsonlAppender, tailPlainSync } from '../format/jsonl.js'
import { JsonStringEncoder } from '../format/json-bytes.js'
import { jsonString } from '../format/json-string.js'
import { FILES } from '../fs/layout.js'
import { maskText, maskValue } from '../format/mask.js'
import { normalizeMessage } from '../format/records.js'
import type { Role, StoredMessage, ToolCall, TurnUsage, WindowMessage } from '../format/records.js'
import { SequencedLog } from '../format/sequenced-log.js'
import type { LogOptions } from '../format/sequenced-log.js'
import { estimateTokens } from '../format/tokens.js'

/** Texts longer than this (characters) are escaped natively (see add). */
const ENCODER_MAX = 8 * 1024

export interface NewMessage {
  role: Role
  content: string
  tool_name?: string
  tool_call_id?: string
  tool_calls?: ToolCall[]
  /** false: recorded in messages.jsonl but never shown to the LLM or the UI. */
  visible?: boolean
  /** The provider's own count, when known; otherwise estimated. */
  token_count?: number
  /** The inbox record it came from (messages.jsonl only; the LLM never sees it). */
  inbox_id?: string
  /** An assistant message's request tokens (messages.jsonl only). */
  usage?: TurnUsage
}

export interface MessageStoreOptions extends LogOptions {
  /** How many recent messages to keep in memory (config context.max_memory_messages). */
  memoryMessages?: number
  now?: () => Date
}

/**
 * The conversation of one task. Every message is masked, given the next seq and
 * appended to messages.jsonl (the truth, never rewritten) and, when visible, to
 * current.jsonl (the window the LLM gets next). Only the last few messages are held
 * in memory, whatever the length of the task.
 */
export class MessageStore {
  private readonly recentMessages: StoredMessage[]
  private readonly json = new JsonStringEncoder()
  private lastMs = -1
  private lastIso = ''

  private constructor(
    readonly dir: string,
    private readonly log: SequencedLog<'seq'>,
    private current: JsonlAppender,
    private readonly options: MessageStoreOptions,
    recent: StoredMessage[],
  ) {
    this.recentMessages = recent
  }

  static open(dir: string, options: MessageStoreOptions = {}): MessageStore {
    const path = join(dir, FILES.messages)
    const log = SequencedLog.open(path, 'seq', [], options)
    const current = JsonlAppender.open(join(dir, FILES.current), { fsync: options.fsync === true })
    const keep = options.memoryMessages ?? 20
    const recent = tailPlainSync(path, keep)
      .records.map(normalizeMessage)
      .filter((m): m is StoredMessage => m !== null)
    return new MessageStore(dir, log, current, options, recent)
  }

  get lastSeq(): number {
    return this.log.lastId
  }

  /** The last `max_memory_messages` messages, oldest first. */
  recent(): readonly StoredMessage[] {
    return this.recentMessages
  }

  add(input: NewMessage): StoredMessage {
    const content = maskText(input.content)
    const toolCalls = input.tool_calls === undefined ? undefined : maskValue(input.tool_calls)
    // The calls' JSON, made once: the estimate and both lines use it.
    const callsJson = toolCalls === undefined ? undefined : JSON.stringify(toolCalls)
    const stored: StoredMessage = {
      seq: this.log.nextId,
      role: input.role,
      content,
      timestamp: this.timestamp(),
      // estimateMessageTokens({content, tool_calls}), from the JSON made above.
      token_count: input.token_count ?? estimateTokens(content) + estimateTokens(callsJson ?? ''),
    }
    if (input.tool_name !== undefined) stored.tool_name = input.tool_name
    if (input.tool_call_id !== undefined) stored.tool_call_id = input.tool_call_id
    if (toolCalls !== undefined) stored.tool_calls = toolCalls
    if (input.visible === false) stored.visible = false
    if (input.inbox_id !== undefined) stored.inbox_id = input.inbox_id
    if (input.usage !== undefined) stored.usage = input.usage
    // The content is most of the bytes: JSON-escaped and UTF-8-encoded once, then
    // spliced into both lines (each still one Buffer and one write). A long text (a tool's
    // result) goes through JSON.stringify, whose answer the tools.jsonl line and the next
    // request take again (jsonString); the hand-written encoder, 2-3× faster on the short
    // texts of most messages once the JIT has compiled it, is ~5× slower before that, which
    // is what a task's first turns would pay on their tool results.
    const escaped = content.length > ENCODER_MAX ? Buffer.from(jsonString(content)) : this.json.encode(content)
    const optional = optionalFields(stored, callsJson)
    const [head, tail] = messageParts(stored, optional)
    this.log.appendSpliced(head, escaped, tail)
    if (stored.visible !== false) this.current.appendSpliced(...windowParts(stored, escaped, optional))
    this.remember(stored)
    return stored
  }

  /** ISO time of now; the string is reused within one millisecond (many appends share one). */
  private timestamp(): string {
    if (this.options.now) return this.options.now().toISOString()
    const ms = Date.now()
    if (ms !== this.lastMs) {
      this.lastMs = ms
      this.lastIso = new Date(ms).toISOString()
    }
    return this.lastIso
  }

  /**
   * Replaces current.jsonl atomically (after a compaction or a rebuild) and reopens
   * it for append: the old descriptor points at the replaced file.
   */
  replaceCurrent(window: readonly WindowMessage[]): void {
    const path = writeWindow(this.dir, window)
    this.current.close()
    this.current = JsonlAppender.open(path, { fsync: this.options.fsync === true })
  }

  close(): void {
    this.log.close()
    this.current.close()
  }

  private remember(message: StoredMessage): void {
    this.recentMessages.push(message)
    const keep = this.options.memoryMessages ?? 20
    if (this.recentMessages.length > keep) this.recentMessages.splice(0, this.recentMessages.length - keep)
  }
}

/**
 * Writes a task's current.jsonl whole, masked, atomically (temp + fsync + rename):
 * for replaceCurrent, and for `compress`, which holds no MessageStore. Returns its path.
 */
export function writeWindow(dir: string, window: readonly WindowMessage[]): string {
  const path = join(dir, FILES.current)
  writeFileAtomic(path, window.map((m) => `${JSON.stringify(maskValue(m))}\n`).join(''))
  return path
}

/**
 * A messages.jsonl line as head + escaped content + tail, so that the largest
 * field is serialized once; the whole is byte-equal to JSON.stringify(record).
 */
function messageParts(m: StoredMessage, optional: string): [string, string] {
  let tail = `,"timestamp":${JSON.stringify(m.timestamp)},"token_count":${m.token_count}${optional}`
  if (m.visible === false) tail += ',"visible":false'
  if (m.inbox_id !== undefined) tail += `,"inbox_id":${JSON.stringify(m.inbox_id)}`
  if (m.usage !== undefined) tail += `,"usage":${JSON.stringify(m.usage)}`
  return [`{"seq":${m.seq},"role":${JSON.stringify(m.role)},"content":`, `${tail}}\n`]
}

/** A current.jsonl line, JSON.stringify(toWindowMessage(m)), in the same three parts. */
function windowParts(m: StoredMessage, content: string | Buffer, optional: string): [string, string | Buffer, string] {
  return [`{"role":${JSON.stringify(m.role)},"content":`, content, `${optional}}\n`]
}

/** The fields after the content both lines share; `callsJson` is JSON.stringify(m.tool_calls). */
function optionalFields(m: StoredMessage, callsJson: string | undefined): string {
  let out = ''
  if (m.tool_name !== undefined) out += `,"tool_name":${JSON.stringify(m.tool_name)}`
  if (m.tool_call_id !== undefined) out += `,"tool_call_id":${JSON.stringify(m.tool_call_id)}`
  if (callsJson !== undefined) out += `,"tool_calls":${callsJson}`
  return out
}
