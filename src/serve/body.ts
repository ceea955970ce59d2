import type { IncomingMessage } from 'node:http'

/** A request body the server refuses: too large, or not a form or JSON object. */
export class BodyError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message)
  }
}

/** A comment is at most 100,000 characters; a body four times that (UTF-8, encoded) is refused. */
const MAX_BODY = 512 * 1024

/** A form (application/x-www-form-urlencoded) or a JSON object, as a flat object of its fields. */
export async function readBody(req: IncomingMessage): Promise<Record<string, unknown>> {
  const chunks: Buffer[] = []
  let size = 0
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length
    if (size > MAX_BODY) throw new BodyError(413, `the request body is larger than ${MAX_BODY / 1024} KiB`)
    chunks.push(chunk)
  }
  const text = Buffer.concat(chunks).toString('utf8')
  if (text.trim() === '') return {}
  const type = (req.headers['content-type'] ?? '').split(';')[0]?.trim().toLowerCase()
  if (type === 'application/json') {
    let value: unknown
    try {
      value = JSON.parse(text)
    } catch {
      throw new BodyError(400, 'the body is not valid JSON')
    }
    if (value === null || typeof value !== 'object' || Array.isArray(value)) throw new BodyError(400, 'the body must be a JSON object')
    return value as Record<string, unknown>
  }
  if (type === 'application/x-www-form-urlencoded') return Object.fromEntries(new URLSearchParams(text))
  throw new BodyError(415, 'send a form (application/x-www-form-urlencoded) or JSON (application/json)')
}
