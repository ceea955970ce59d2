// ctxagent's hidden marker (docs/contract.md §13.1): written in one place, in one format, and read back only there.

const UUID = '[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}'

/** The hidden marker on every comment and body ctxagent writes (docs/contract.md §13.1). */
export const marker = (uuid: string): string => `<!-- ctxagent:${uuid} -->`

/**
 * Anything that reads as a marker, however spelt (spaces, case, any id): removed from every
 * text ctxagent writes into a body or comment before its own marker is added, so that a
 * marker pasted into an issue and echoed by the model is never ctxagent's word
 * (docs/delivery.md#the-review-loop).
 */
const ANY_MARKER = /<!--\s*ctxagent\s*:[^>]*?-->/gi

export function stripMarkers(text: string): string {
  // Until nothing is left: removing one must not join two halves into another.
  let out = text
  for (let before = ''; before !== out; ) {
    before = out
    out = out.replace(ANY_MARKER, '')
  }
  return out
}

/** A body or comment as ctxagent writes it: the text with no marker of anyone's, then its own, alone on the last line. */
export function withMarker(text: string, uuid: string): string {
  return `${stripMarkers(text).trimEnd()}\n\n${marker(uuid)}`
}

/**
 * The uuid of ctxagent's marker in a body or comment it wrote: only on the last non-empty
 * line, alone, in exactly the format withMarker writes; null otherwise. A marker anywhere
 * else (quoted, pasted into the answer, in an issue's text) is not ctxagent's.
 */
export function markerOf(body: string | null | undefined): string | null {
  const last = (body ?? '').trimEnd().split('\n').pop() ?? ''
  return new RegExp(`^<!-- ctxagent:(${UUID}) -->$`).exec(last.trim())?.[1] ?? null
}

/**
 * The bot's own comment: written by its account AND ending with the marker of a ctxagent
 * task. Either alone is not enough: anyone can paste the marker into a comment (which
 * would then be silently dropped), and the bot's account may be a person's too. With no
 * bot name configured nothing is the bot's: a comment is kept (quoted) rather than lost.
 */
export function isOwn(body: string, author: string | undefined, botName: string | null): boolean {
  return botName !== null && author === botName && markerOf(body) !== null
}
