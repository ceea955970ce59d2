/** The hidden marker on every comment ctxagent writes (docs/contract.md §13.1). */
export const marker = (uuid: string): string => `<!-- ctxagent:${uuid} -->`

/**
 * The bot's own comment: written by its account AND carrying the marker of a ctxagent
 * task. Either alone is not enough: anyone can paste the marker into a comment (which
 * would then be silently dropped), and the bot's account may be a person's too. With no
 * bot name configured nothing is the bot's: a comment is kept (quoted) rather than lost.
 */
export function isOwn(body: string, author: string | undefined, botName: string | null): boolean {
  return botName !== null && author === botName && /<!-- ctxagent:[0-9a-f-]+ -->/.test(body)
}

/** The marker of the task that opened a pull/merge request, in its body: the uuid it names (docs/delivery.md#the-review-loop). */
export const OPENER_MARKER = /<!-- ctxagent:([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}) -->/
