import type { z } from 'zod'
import { CtxError } from '../errors.js'

export type ForgeName = 'GitHub' | 'GitLab'

/**
 * A forge's reply, checked against the fields ctxagent reads of it (the shapes its API
 * documents): a reply without them (a proxy's page, another server at the configured URL,
 * an API version that changed) is one line naming the forge, the request and the first
 * field that is missing or of another type, instead of a TypeError deep in the code that
 * read it.
 */
export function forgeReply<T>(forge: ForgeName, request: string, schema: z.ZodType<T>, data: unknown): T {
  const parsed = schema.safeParse(data)
  if (parsed.success) return parsed.data
  const issue = parsed.error.issues[0]
  const at = (issue?.path ?? []).map((p) => (typeof p === 'number' ? `[${p}]` : `.${String(p)}`)).join('')
  const field = at === '' ? 'the reply' : at.replace(/^\./, '')
  const why =
    issue?.code === 'invalid_type' && / received undefined$/.test(issue.message) ? 'is missing' : `is not as documented (${issue?.message ?? 'invalid'})`
  throw new CtxError(`${forge}'s reply to ${request} is not what its API documents: ${field} ${why}`, {
    hint: `check ${forge === 'GitHub' ? 'github.api_url' : 'gitlab.url'}: is the forge's API answering there?`,
  })
}
