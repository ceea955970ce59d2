import type { StoredMessage } from '../storage/format/records.js'

const CLIP = 6000

/** One message as a line of a transcript for a summarizer; huge tool output is clipped in the middle. */
export function transcriptLine(m: StoredMessage, max = CLIP): string {
  const calls = m.tool_calls?.length ? ` → ${m.tool_calls.map((c) => `${c.function.name}(${clip(c.function.arguments, 400)})`).join(', ')}` : ''
  const who = m.role === 'tool' ? `tool ${m.tool_name ?? ''}`.trim() : m.role
  return `[${m.seq}] ${who}${calls}: ${clip(m.content, max)}`
}

function clip(text: string, max: number): string {
  if (text.length <= max) return text
  const head = Math.floor(max * 0.7)
  const tail = max - head
  return `${text.slice(0, head)}\n[… ${text.length - max} characters omitted …]\n${text.slice(-tail)}`
}
