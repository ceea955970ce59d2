/**
 * Stored text made safe to print to a terminal (docs/contract.md §8): a model's answer, a tool
 * result or a comment may carry escape sequences that set the clipboard (OSC 52), the
 * window title, or rewrite what is on screen. Human output strips them whatever the
 * destination (a pipe may end in a terminal: `| less -R`, `| tee`); --json escapes
 * them anyway. Kept: line breaks and tabs. Removed: ESC sequences (CSI, OSC, DCS, SOS,
 * PM, APC, and two-character ones), C1 controls, and every other C0 control (BEL,
 * backspace, carriage return), which can hide or overwrite text.
 */
const SEQUENCES = /\x1b(?:\[[0-?]*[ -/]*[@-~]?|[\]PX^_][\s\S]*?(?:\x07|\x1b\\|\x9c|$)|[ -/]*[0-~]?)|[\x90\x98\x9d\x9e\x9f][\s\S]*?(?:\x07|\x1b\\|\x9c|$)/g
const CONTROLS = /[\x00-\x08\x0b-\x1f\x7f-\x9f]/g

export function forTerminal(text: string): string {
  if (!/[\x00-\x08\x0b-\x1f\x7f-\x9f]/.test(text)) return text
  return text.replace(SEQUENCES, '').replace(CONTROLS, '')
}

/** ctxagent's own colours: SGR sequences (ESC [ params m), which set attributes and do nothing else. */
const SGR = /(\x1b\[[0-9;]*m)/

/**
 * forTerminal for text ctxagent coloured itself: its SGR colour sequences are kept and
 * every other sequence and control is stripped, each stretch between two colours on its
 * own, so no sequence can be assembled across a colour.
 */
export function forColourTerminal(text: string): string {
  if (!/[\x00-\x08\x0b-\x1f\x7f-\x9f]/.test(text)) return text
  return text
    .split(SGR)
    .map((part, i) => (i % 2 === 1 ? part : forTerminal(part)))
    .join('')
}

/** Every string inside a JSON-like value made safe to print (keys too: they are printed as well). */
export function forTerminalDeep<T>(value: T): T {
  if (typeof value === 'string') return forTerminal(value) as T
  if (Array.isArray(value)) return value.map((item) => forTerminalDeep(item)) as T
  if (value !== null && typeof value === 'object') {
    const out: Record<string, unknown> = {}
    for (const [key, item] of Object.entries(value)) out[forTerminal(key)] = forTerminalDeep(item)
    return out as T
  }
  return value
}
