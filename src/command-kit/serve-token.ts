import type { CommandEnv } from '../command-env.js'
import { UsageError } from '../errors.js'

const MIN_TOKEN = 16

/** serve.token, or CTXAGENT_SERVE_TOKEN over it; a secret (masked wherever it would be printed). */
export function serveToken(ctx: CommandEnv): string | null {
  const fromEnv = ctx.env.CTXAGENT_SERVE_TOKEN
  if (fromEnv !== undefined && fromEnv !== '') {
    if (fromEnv.length < MIN_TOKEN)
      throw new UsageError(`CTXAGENT_SERVE_TOKEN is shorter than ${MIN_TOKEN} characters`, 'use a long random one: openssl rand -hex 32')
    return fromEnv
  }
  return ctx.config.serve.token
}
