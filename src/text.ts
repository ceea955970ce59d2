/** Small text helpers for one-line messages. */

/** `text` cut to at most `max` characters, an ellipsis marking the cut. */
export function clip(text: string, max: number): string {
  return text.length > max ? `${text.slice(0, max - 1)}…` : text
}

/** Input echoed back in a message: its first `max` characters and, when cut, its length. */
export function cutInput(text: string, max: number): string {
  return text.length <= max ? text : `${text.slice(0, max)}… (${text.length} characters)`
}

/** A path cut for a one-line message: its start and its end. */
export function shortPath(path: string, max = 160): string {
  return path.length <= max ? path : `${path.slice(0, 60)}…${path.slice(-(max - 61))}`
}

/** The first `shown` of `items`, comma-separated, then ", and N more" for the rest. */
export function sampleOf(items: readonly string[], shown: number): string {
  const more = items.length > shown ? `, and ${items.length - shown} more` : ''
  return `${items.slice(0, shown).join(', ')}${more}`
}

/**
 * Orders two strings by their UTF-16 code units, as `<` does; for sorting ISO times, uuids,
 * ids and file names. Not localeCompare: its first call starts ICU's collator, ~8 ms of CPU
 * that `list` paid for one sort.
 */
export function byCodeUnits(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0
}

/**
 * A number as 12,345 (what toLocaleString('en-US') gives), without Intl: its first call
 * loads the locale data, ~25 ms of CPU that every `run` paid for one line.
 */
export function grouped(n: number): string {
  if (!Number.isSafeInteger(n)) return n.toLocaleString('en-US')
  const digits = String(Math.abs(n)).replace(/\B(?=(\d{3})+$)/g, ',')
  return n < 0 ? `-${digits}` : digits
}

/**
 * `text` wrapped at spaces into lines of at most `width` characters, each after the first
 * indented by `indent` spaces (a word longer than a line stands alone, whole: a path is
 * never cut). For human output on a terminal; a pipe gets the one long line.
 */
export function wrapWords(text: string, width: number, indent: number): string {
  const lines: string[] = []
  let line = ''
  for (const word of text.split(' ')) {
    const room = width - (lines.length === 0 ? 0 : indent)
    if (line !== '' && line.length + 1 + word.length > room) {
      lines.push(line)
      line = word
    } else line = line === '' ? word : `${line} ${word}`
  }
  lines.push(line)
  return lines.map((l, i) => (i === 0 ? l : `${' '.repeat(indent)}${l}`)).join('\n')
}

/** What a name given on the command line or in a job may be (a user, a task id, a model, an idempotency key). */
export const NAME_RULE = '1 to 200 printable characters'

/** Whether `value` keeps NAME_RULE: not blank, at most 200 characters, no control character. Trim it first where spaces around it do not count. */
export function isPrintableName(value: string): boolean {
  return value.trim() !== '' && value.length <= 200 && !/[\u0000-\u001f\u007f]/.test(value)
}
