// The config's URL checks, apart from the schema: a command's start-up uses them without loading zod
// (the environment's OPENAI_BASE_URL and the like, the index's database URL; docs/development.md#start-up).

/** An http(s) URL with a host: what a client can be pointed at (never `javascript:…` or `localhost:11434`). */
export function isHttpUrl(value: string): boolean {
  if (/\s/.test(value) || !/^https?:\/\//i.test(value)) return false
  try {
    const url = new URL(value)
    return (url.protocol === 'http:' || url.protocol === 'https:') && url.hostname !== ''
  } catch {
    return false
  }
}

/** A PostgreSQL connection URL (`postgres://` or `postgresql://`); a secret, so it is never echoed back. */
export function isPostgresUrl(value: string): boolean {
  if (/\s/.test(value) || !/^postgres(ql)?:\/\//i.test(value)) return false
  try {
    return new URL(value).hostname !== ''
  } catch {
    return false
  }
}
