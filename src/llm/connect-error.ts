/** Why a connection to an LLM server failed, in words, with what to check (docs/running.md#llm-servers). */
export interface ConnectFailure {
  /** e.g. "connection refused", "could not resolve llm.internal" */
  what: string
  /** What to do, naming the config key. */
  hint: string
}

const TLS_CODES = /^(CERT_|UNABLE_TO_|DEPTH_ZERO_|SELF_SIGNED_|ERR_TLS_|ERR_SSL_|EPROTO$)/

/** The errno-like code and hostname of the first error in `err`'s cause chain that has one. */
function systemCause(err: unknown): { code: string; hostname: string | null; message: string } | null {
  let e: unknown = err
  for (let depth = 0; depth < 6 && e instanceof Error; depth++) {
    const code = (e as { code?: unknown }).code
    if (typeof code === 'string' && code !== '') {
      const hostname = (e as { hostname?: unknown }).hostname
      return { code, hostname: typeof hostname === 'string' ? hostname : null, message: e.message }
    }
    e = (e as { cause?: unknown }).cause
  }
  return null
}

/**
 * Names the cause of a failed connection from the error's `cause` chain (the SDKs wrap
 * Node's error in a TypeError('fetch failed')): refused, not resolved, TLS, timed out,
 * reset, unreachable. `key` is the config key of the server's URL. Null when the chain
 * says nothing more than the SDK did.
 */
export function explainConnectFailure(err: unknown, key: string): ConnectFailure | null {
  const cause = systemCause(err)
  if (cause === null) return null
  const { code, hostname } = cause
  switch (code) {
    case 'ECONNREFUSED':
      return { what: 'connection refused', hint: `is the server running and listening there? check ${key}` }
    case 'ENOTFOUND':
    case 'EAI_NONAME':
    case 'EAI_AGAIN':
    case 'EAI_FAIL':
      return {
        what: `could not resolve ${hostname ?? 'the host name'}${code === 'EAI_AGAIN' ? ' (DNS did not answer)' : ''}`,
        hint: `check the host name in ${key}, and this machine's DNS`,
      }
    case 'ETIMEDOUT':
    case 'UND_ERR_CONNECT_TIMEOUT':
      return { what: 'the connection timed out', hint: `check ${key}, and that no firewall drops the traffic` }
    case 'ECONNRESET':
    case 'EPIPE':
    case 'UND_ERR_SOCKET':
      return { what: 'the connection was reset', hint: `check the server's logs, and that ${key} uses the scheme it serves (http or https)` }
    case 'EHOSTUNREACH':
    case 'ENETUNREACH':
      return { what: 'no route to the host', hint: `check ${key} and this machine's network` }
  }
  if (TLS_CODES.test(code)) {
    return {
      what: `TLS failed (${code}: ${cause.message})`,
      hint: `check the server's certificate; a private CA goes in NODE_EXTRA_CA_CERTS; and that ${key} uses https only where the server speaks it`,
    }
  }
  return { what: `${cause.message} (${code})`, hint: `check ${key}` }
}
