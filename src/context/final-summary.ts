import { join } from 'node:path'
import type { LlmClient } from '../llm/client.js'
import { readJsonl } from '../storage/format/jsonl.js'
import { FILES } from '../storage/fs/layout.js'
import { normalizeMessage } from '../storage/format/records.js'
import type { StoredMessage } from '../storage/format/records.js'
import { finalSummary } from './summarizer.js'

/** The visible messages of a task, streamed from messages.jsonl (or its .gz). */
export async function* visibleMessages(dir: string): AsyncGenerator<StoredMessage> {
  for await (const item of readJsonl(join(dir, FILES.messages))) {
    if (!item.ok || item.record.visible === false) continue
    const message = normalizeMessage(item.record)
    if (message) yield message
  }
}

/** The text for final_summary.txt: the whole task summarized, the history streamed. */
export function createFinalSummary(dir: string, client: LlmClient, maxTokens?: number): Promise<string> {
  return finalSummary(client, visibleMessages(dir), maxTokens)
}
