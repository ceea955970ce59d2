import type { LlmClient } from '../llm/client.js'
import type { StoredMessage } from '../storage/format/records.js'
import { loadSnapshot } from './snapshot.js'
import { finalSummary, noUsage } from './summarizer.js'
import type { SummaryUsage } from './summarizer.js'

/**
 * The text for final_summary.txt and what making it cost (state.json's
 * final_summary_tokens): the whole task summarized from its latest running summary and
 * the messages after it (the window's history), in at most two requests.
 */
export async function createFinalSummary(dir: string, client: LlmClient, maxTokens?: number): Promise<{ text: string; usage: SummaryUsage }> {
  const snapshot = await loadSnapshot(dir)
  const usage = noUsage()
  // After a summary the window holds the task statement apart, before it: so does the transcript.
  const after = snapshot.after.filter((m) => m.role !== 'system')
  const messages: StoredMessage[] = snapshot.summary !== null && snapshot.task !== null ? [snapshot.task, ...after] : after
  const text = await finalSummary(client, snapshot.summary?.summary ?? null, messages, maxTokens, usage)
  return { text, usage }
}
