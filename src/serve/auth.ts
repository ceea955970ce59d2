import { createHash, randomBytes, timingSafeEqual } from 'node:crypto'
import type { IncomingMessage } from 'node:http'

/** A signed-in operator: who, and the token their forms carry against cross-site requests. */
export interface Session {
  operator: string
  csrf: string
  expires: number
}

/** Who made a request, as far as the server can tell. */
export type Caller =
  | { kind: 'anonymous' }
  | { kind: 'bearer'; operator: string }
  | { kind: 'session'; operator: string; session: Session; id: string }
  /** Credentials were given and are wrong. */
  | { kind: 'refused'; why: string }

export const COOKIE = 'ctxagent_session'
const SESSION_MS = 12 * 3_600_000
const NAME = /^[\w.@+-]{1,64}$/

/**
 * serve's sign-in: the token (serve.token or CTXAGENT_SERVE_TOKEN) as a bearer header,
 * or posted once on /login for an HttpOnly SameSite=Strict session cookie whose forms
 * carry a per-session CSRF token. Sessions live in this process only: a restart signs
 * everyone out, which is the safe way round.
 */
export class Auth {
  private readonly sessions = new Map<string, Session>()
  private readonly digest: Buffer | null

  constructor(
    token: string | null,
    private readonly now: () => number = Date.now,
  ) {
    this.digest = token === null ? null : sha256(token)
  }

  get hasToken(): boolean {
    return this.digest !== null
  }

  /** Compared as digests, in constant time: the token's length is not told either. */
  matches(candidate: string): boolean {
    return this.digest !== null && timingSafeEqual(this.digest, sha256(candidate))
  }

  caller(req: IncomingMessage): Caller {
    const header = req.headers.authorization
    if (header !== undefined) {
      const m = /^Bearer\s+(\S+)$/i.exec(header)
      if (m === null || !this.matches(m[1] as string)) return { kind: 'refused', why: 'the bearer token is wrong' }
      return { kind: 'bearer', operator: operatorName(req.headers['x-ctxagent-operator']) ?? 'bearer' }
    }
    const id = cookieValue(req.headers.cookie, COOKIE)
    if (id === null) return { kind: 'anonymous' }
    const session = this.sessions.get(id)
    if (session === undefined || session.expires < this.now()) {
      this.sessions.delete(id)
      return { kind: 'anonymous' }
    }
    return { kind: 'session', operator: session.operator, session, id }
  }

  /** A new session for an operator who posted the right token; null when it is wrong. */
  signIn(token: string, name: string | undefined): { id: string; session: Session } | null {
    if (!this.matches(token)) return null
    const id = randomBytes(32).toString('base64url')
    const session = { operator: operatorName(name) ?? 'operator', csrf: randomBytes(32).toString('base64url'), expires: this.now() + SESSION_MS }
    this.sessions.set(id, session)
    return { id, session }
  }

  signOut(id: string): void {
    this.sessions.delete(id)
  }
}

/** A session's CSRF token checked against what a form carried, in constant time. */
export function csrfMatches(session: Session, given: string | undefined): boolean {
  return given !== undefined && timingSafeEqual(sha256(session.csrf), sha256(given))
}

/** An operator's name for the audit log: letters, digits and . _ @ + - only, else none. */
export function operatorName(value: string | string[] | undefined): string | null {
  const name = Array.isArray(value) ? value[0] : value
  return name !== undefined && NAME.test(name.trim()) ? name.trim() : null
}

export function sessionCookie(id: string, maxAgeSeconds = SESSION_MS / 1000): string {
  return `${COOKIE}=${id}; HttpOnly; SameSite=Strict; Path=/; Max-Age=${maxAgeSeconds}`
}

function cookieValue(header: string | undefined, name: string): string | null {
  if (header === undefined) return null
  for (const part of header.split(';')) {
    const at = part.indexOf('=')
    if (at > 0 && part.slice(0, at).trim() === name) return part.slice(at + 1).trim()
  }
  return null
}

function sha256(text: string): Buffer {
  return createHash('sha256').update(text).digest()
}

/** Loopback: where reads need no token (docs/contract.md §15). */
export function isLoopback(host: string): boolean {
  return host === 'localhost' || host === '::1' || host === '[::1]' || /^127(?:\.\d{1,3}){3}$/.test(host)
}

const BASE = 'http://serve.invalid'

/**
 * Where signing in returns to: a path on this server given by the page that sent the
 * operator to /login (`next`), or `/`. Anything that could lead elsewhere (another
 * origin, `//host`, a backslash browsers read as a slash, a scheme, control characters)
 * is `/`: no open redirect.
 */
export function returnPath(value: unknown): string {
  if (typeof value !== 'string' || value.length > 2000 || !value.startsWith('/') || /[\\\u0000-\u0020\u007f]/.test(value) || value.startsWith('//')) return '/'
  let url: URL
  try {
    url = new URL(value, BASE)
  } catch {
    return '/'
  }
  if (url.origin !== BASE || url.pathname === '/login' || url.pathname === '/logout') return '/'
  return `${url.pathname}${url.search}`
}
