import type { JsonRecord } from '../storage/format/jsonl.js'
import { forTerminalDeep } from '../terminal-text.js'
import { clip, grouped } from '../text.js'
import { mainArgument } from '../tools/main-argument.js'

/**
 * One transcript message as the task page shows it: built once, here, for both the
 * page the server renders (task-page.ts) and the live stream (live.ts), whose script
 * only places what it is given (assets.ts). Text only: each side escapes it (the
 * server's html``, the script's textContent).
 */
export interface MessageView {
  seq: number | null
  role: string
  /** The role as a class name (`m-<kind>`, `r-<kind>`): letters only. */
  kind: string
  /** The list item's classes: `msg m-<kind>` and the marks. */
  classes: string
  /** The tool that gave a result. */
  tool: string | null
  /** summarized (a compaction covers it), hidden (kept out of the model's view). */
  marks: string[]
  /** A tool's result, collapsed: its summary line (length and a preview) and the whole text. */
  result: { summary: string; text: string } | null
  /** Any other message's text ('' for none). */
  text: string
  /** The tool calls it made: the tool, what the call is about (its main argument), its arguments pretty-printed. */
  calls: { name: string; about: string | null; args: string }[]
}

/** The view of a messages.jsonl record; terminal escapes and control characters are made visible first, as everywhere the task's text is shown. */
export function messageView(raw: JsonRecord): MessageView {
  const r = forTerminalDeep(raw)
  const role = typeof r.role === 'string' ? r.role : 'unknown'
  const content = typeof r.content === 'string' ? r.content : r.content == null ? '' : JSON.stringify(r.content)
  const marks = [r.is_summarized === true ? 'summarized' : '', r.visible === false ? 'hidden' : ''].filter(Boolean)
  const kind = role.replace(/[^a-z]/g, '')
  const calls = Array.isArray(r.tool_calls) ? (r.tool_calls as { function?: { name?: unknown; arguments?: unknown } }[]) : []
  return {
    seq: typeof r.seq === 'number' ? r.seq : null,
    role,
    kind,
    classes: ['msg', `m-${kind}`, ...marks].join(' '),
    tool: typeof r.tool_name === 'string' && r.tool_name !== '' ? r.tool_name : null,
    marks,
    result: role === 'tool' ? { summary: `result · ${grouped(content.length)} chars: ${clip(content.replace(/\s+/g, ' ').trim(), 90)}`, text: content } : null,
    text: role === 'tool' ? '' : content,
    calls: calls.map((call) => {
      const name = typeof call?.function?.name === 'string' ? call.function.name : '?'
      const raw = typeof call?.function?.arguments === 'string' ? call.function.arguments : ''
      let args: unknown = raw
      try {
        args = JSON.parse(raw)
      } catch {
        // Malformed arguments are shown as they came.
      }
      return { name, about: mainArgument(name, args, 60), args: typeof args === 'string' ? args : JSON.stringify(args, null, 2) }
    }),
  }
}
