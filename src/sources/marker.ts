/** The hidden marker on every comment ctxagent writes (SPEC §13.1). */
export const marker = (uuid: string): string => `<!-- ctxagent:${uuid} -->`

/** The bot's own comment: by its account, or carrying the marker of any ctxagent task. */
export function isOwn(body: string, author: string | undefined, botName: string | null): boolean {
  return /<!-- ctxagent:[0-9a-f-]+ -->/.test(body) || (botName !== null && author === botName)
}
