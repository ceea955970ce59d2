/**
 * A credential helper given on git's command line (`-c credential.helper=…`) for one
 * push, clone or fetch: it answers git's `get` with the token in the git process's
 * environment (never on a command line, in a file or a URL), and only when git asks for
 * the origin it was given for (`CTXAGENT_GIT_ORIGIN`, `protocol://host[:port]`): after a
 * redirect to another host, or a URL the repository's configuration rewrote
 * (`url.<base>.insteadOf`), git asks for that other host and gets nothing
 * (docs/delivery.md#the-tokens-path). Protocol and host are compared in lower case, a
 * default port (443, 80) dropped, as `URL.host` has them.
 */
export const HELPER = [
  '!f() { test "$1" = get || exit 0; p=; h=;',
  // biome-ignore lint/suspicious/noTemplateCurlyInString: the shell's parameter expansions
  'while IFS= read -r l; do case "$l" in protocol=*) p=${l#protocol=};; host=*) h=${l#host=};; esac; done;',
  `o=$(printf '%s://%s' "$p" "$h" | tr A-Z a-z); case "$o" in https://*:443) o=\${o%:443};; http://*:80) o=\${o%:80};; esac;`,
  'test -n "$CTXAGENT_GIT_ORIGIN" && test "$o" = "$CTXAGENT_GIT_ORIGIN" || exit 0;',
  'echo "username=$CTXAGENT_GIT_USERNAME"; echo "password=$CTXAGENT_GIT_TOKEN"; }; f',
].join(' ')

/** The helper's environment for an HTTP(S) URL (null: not HTTP(S)). */
export function helperEnv(url: string, username: string, token: string): Record<string, string> | null {
  const at = httpOrigin(url)
  return at === null ? null : { CTXAGENT_GIT_ORIGIN: at.origin, CTXAGENT_GIT_USERNAME: username, CTXAGENT_GIT_TOKEN: token }
}

/** An HTTP(S) URL's host (with its port, if any) and origin (`protocol://host`), lower-cased; null for any other URL or a path. */
export function httpOrigin(url: string): { host: string; origin: string } | null {
  let parsed: URL
  try {
    parsed = new URL(url)
  } catch {
    return null
  }
  if (parsed.protocol !== 'https:' && parsed.protocol !== 'http:') return null
  const host = parsed.host.toLowerCase()
  return { host, origin: `${parsed.protocol}//${host}` }
}
