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
