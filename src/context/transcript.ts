import type { StoredMessage } from '../storage/format/records.js'

const CLIP = 6000
/**
 * A tool output goes to a summarizer as its first this many characters: what it was
 * about, not all of it (the model read it whole when it came; the whole stays in
 * tools.jsonl). Sending outputs at 6,000 characters made summaries re-send the task:
 * 16 % of a long session's input (issue 30).
 */
export const TOOL_HEAD = 500

/**
 * One message as a line of a transcript for a summarizer: a tool output as a short head
 * (a leading `[blob:<id>]` reference is in it), other text clipped in the middle at `max`.
 */
export function transcriptLine(m: StoredMessage, max = CLIP): string {
  const calls = m.tool_calls?.length ? ` → ${m.tool_calls.map((c) => `${c.function.name}(${clip(c.function.arguments, 400)})`).join(', ')}` : ''
  const who = m.role === 'tool' ? `tool ${m.tool_name ?? ''}`.trim() : m.role
  const text = m.role === 'tool' ? head(m.content, Math.min(max, TOOL_HEAD)) : clip(m.content, max)
  return `[${m.seq}] ${who}${calls}: ${text}`
}

function head(text: string, max: number): string {
  if (text.length <= max) return text
  return `${text.slice(0, max)}\n[… ${text.length - max} more characters, in tools.jsonl]`
}

function clip(text: string, max: number): string {
  if (text.length <= max) return text
  const head = Math.floor(max * 0.7)
  const tail = max - head
  return `${text.slice(0, head)}\n[… ${text.length - max} characters omitted …]\n${text.slice(-tail)}`
}
