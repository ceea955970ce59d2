import { homedir } from 'node:os'
import { isAbsolute, join } from 'node:path'

/** The XDG base directories ctxagent uses, each with its place under the home directory when unset. */
const FALLBACK = {
  XDG_CONFIG_HOME: ['.config'],
  XDG_CACHE_HOME: ['.cache'],
  XDG_STATE_HOME: ['.local', 'state'],
} as const

/**
 * The XDG base directory `variable` names, else its place under the user's home (HOME when
 * absolute, else the account's). A relative value is ignored, as the XDG spec says: it would
 * be taken from the current directory, which may be an agent's workspace.
 */
export function xdgDirectory(env: NodeJS.ProcessEnv, variable: keyof typeof FALLBACK): string {
  const given = env[variable]
  if (given !== undefined && isAbsolute(given)) return given
  const home = env.HOME !== undefined && isAbsolute(env.HOME) ? env.HOME : homedir()
  return join(home, ...FALLBACK[variable])
}
