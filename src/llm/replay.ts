import { existsSync, statSync } from 'node:fs'
import { join } from 'node:path'
import { ProviderError, UsageError } from '../errors.js'
import { checkRegularFile } from '../input-file.js'
import { readJsonl, resolveDataFile } from '../storage/format/jsonl.js'
import type { ReadItem } from '../storage/format/jsonl.js'
import { FILES, resolveTask } from '../storage/fs/layout.js'
import type { Layout } from '../storage/fs/layout.js'
import { normalizeMessage } from '../storage/format/records.js'
import type { StoredMessage } from '../storage/format/records.js'
import type { ChatMessage, ChatOptions, ChatResult, LlmClient } from './client.js'

/**
 * The `replay` provider (docs/contract.md §12.8): plays back the assistant messages of a recorded
 * task in order, while the tools run for real. The recording is streamed, one turn
 * ahead, so a recording of any size costs the memory of one turn. The recorded tool
 * results of the turn just played are kept, so the loop can say where a live result
 * differs.
 */
export class ReplayClient implements LlmClient {
  readonly model = 'replay'
  get server(): string {
    return `the recording ${this.source}`
  }
  private readonly records: AsyncIterator<ReadItem>
  private lookahead: StoredMessage | null = null
  private expectedResults = new Map<string, string>()
  private played = 0

  private constructor(
    readonly source: string,
    readonly contextLength: number,
  ) {
    this.records = readJsonl(source)[Symbol.asyncIterator]()
  }

  /**
   * `from`: a task uuid (or prefix) in the tree, a task directory, or a messages.jsonl
   * (gzipped or not). `skip`: assistant messages already played (a resumed replay).
   */
  static async open(from: string, layout: Layout, contextLength: number, skip = 0): Promise<ReplayClient> {
    const client = new ReplayClient(locateRecording(from, layout), contextLength)
    for (let i = 0; i < skip; i++) {
      if ((await client.nextAssistant()) === null) break
      client.played++
    }
    return client
  }

  /** Stops reading the recording (closes the file). */
  async close(): Promise<void> {
    await this.records.return?.()
  }

  /** Assistant messages played so far (including those skipped on resume). */
  get position(): number {
    return this.played
  }

  /** The recorded result of a tool call of the last played turn, when the recording has one. */
  expected(callId: string): string | undefined {
    return this.expectedResults.get(callId)
  }

  async chat(_messages: ChatMessage[], options: ChatOptions = {}): Promise<ChatResult> {
    if (options.signal?.aborted) throw new ProviderError('replay was cancelled')
    const turn = await this.nextAssistant()
    if (turn === null) {
      throw new ProviderError(
        `the recording ${this.source} has no more assistant messages (${this.played} played)`,
        'the recorded task ended here; replay a longer recording, or resume with a real provider',
      )
    }
    this.played++
    await this.collectResults(turn)
    return {
      message: { role: 'assistant', content: turn.content, ...(turn.tool_calls?.length ? { tool_calls: turn.tool_calls } : {}) },
      usage: null,
    }
  }

  /** The next assistant message of the recording (one looked ahead at first), or null at its end. */
  async nextAssistant(): Promise<StoredMessage | null> {
    if (this.lookahead) {
      const found = this.lookahead
      this.lookahead = null
      return found
    }
    for (let m = await this.next(); m !== null; m = await this.next()) {
      if (m.role === 'assistant' && m.visible !== false) return m
    }
    return null
  }

  /** Reads the tool results after `turn`, up to the next assistant message (kept for the next call). */
  private async collectResults(turn: StoredMessage): Promise<void> {
    this.expectedResults = new Map()
    const ids = new Set((turn.tool_calls ?? []).map((c) => c.id))
    if (ids.size === 0) return
    for (let m = await this.next(); m !== null; m = await this.next()) {
      if (m.role === 'assistant' && m.visible !== false) {
        this.lookahead = m
        return
      }
      if (m.role === 'tool' && m.tool_call_id !== undefined && ids.has(m.tool_call_id)) this.expectedResults.set(m.tool_call_id, m.content)
    }
  }

  private async next(): Promise<StoredMessage | null> {
    for (;;) {
      const item = await this.records.next()
      if (item.done) return null
      if (!item.value.ok) continue
      const message = normalizeMessage(item.value.record)
      if (message) return message
    }
  }
}

/**
 * Refuses, before a task is created, a recording with nothing to play: no assistant
 * message in it (an empty file, another kind of JSONL, binary garbage).
 */
export async function checkRecordingPlays(from: string, layout: Layout): Promise<void> {
  const client = await ReplayClient.open(from, layout, 0)
  const first = await client.nextAssistant()
  await client.close()
  if (first === null)
    throw new UsageError(`--replay-from ${from}: the recording has no assistant messages to play`, "give a task's messages.jsonl, its directory or its uuid")
}

/** The messages.jsonl a replay reads, or a usage error saying why there is none. */
export function locateRecording(from: string, layout: Layout): string {
  if (existsSync(from)) {
    const hint = 'give a task directory, a task uuid or a messages.jsonl file'
    if (!statSync(from).isDirectory()) {
      checkRegularFile(from, '--replay-from', hint)
      return from
    }
    const path = resolveDataFile(join(from, FILES.messages))
    if (path === null) throw new UsageError(`${from} has no messages.jsonl to replay`, hint)
    return path
  }
  if (/^[0-9a-f-]{8,36}$/i.test(from.trim())) {
    const ref = resolveTask(layout, from)
    const path = resolveDataFile(join(ref.dir, FILES.messages))
    if (path === null) throw new UsageError(`task ${ref.uuid} has no messages.jsonl to replay`, 'replay a task that has messages')
    return path
  }
  throw new UsageError(`--replay-from ${from}: no such file, directory or task`, 'give a task uuid, a task directory or a messages.jsonl file')
}
