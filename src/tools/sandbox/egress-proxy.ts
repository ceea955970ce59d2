import { lookup as dnsLookup } from 'node:dns/promises'
import { chmodSync, chownSync, mkdtempSync, rmSync } from 'node:fs'
import { createServer, request as httpRequest } from 'node:http'
import type { IncomingMessage, OutgoingHttpHeaders, ServerResponse } from 'node:http'
import { connect } from 'node:net'
import type { Socket } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { Duplex } from 'node:stream'
import { decide, normalHost, parseNetworks } from './egress-policy.js'
import type { EgressSettings, Lookup } from './egress-policy.js'

/*
 * The egress proxy of `network: proxy` (docs/security.md#the-network): an HTTP proxy on a
 * Unix socket outside the sandbox, bound into it, that a forwarder inside
 * (egress-forwarder.ts) reaches from the sandbox's own loopback. It takes CONNECT
 * (https, any tunnel) and absolute-URI plain HTTP, decides each connection on the address
 * the name resolves to (egress-policy.ts) and connects to that very address. Every
 * connection, allowed or refused, is one record for the task's tools.jsonl.
 */

/** One connection as the task's tools.jsonl keeps it (a `kind: network` record). */
export interface ConnectionRecord {
  /** Who asked: run_command, or mcp:<server>. */
  by: string
  /** CONNECT for a tunnel, else the HTTP method of a plain request. */
  method: string
  host: string
  port: number
  /** The address connected to (or the one refused), null when there was none. */
  address: string | null
  allowed: boolean
  /** Why it was refused, or why an allowed one failed; null when it went through. */
  reason: string | null
  /** Bytes sent to the host and received from it (headers included). */
  bytes_up: number
  bytes_down: number
  duration_ms: number
}

export interface EgressProxy {
  /** The Unix socket to bind into the sandbox. */
  readonly socket: string
  /** Closes every connection (each one's record is written first) and removes the socket. */
  close(): Promise<void>
}

export interface ProxyOptions {
  settings: EgressSettings
  by: string
  log: (record: ConnectionRecord) => void
  /** Who may connect to the socket (the sandbox's user, when ctxagent is root). */
  owner?: { uid: number; gid: number }
  lookup?: Lookup
  /**
   * Whether an address is this host, never reached (default: loopback and this host's
   * interfaces' addresses). Tests of the proxy alone put a stand-in upstream on 127.0.0.1
   * and say it is not.
   */
  isLocal?: (address: string) => boolean
  /** Connections open at once, at most; more are refused (503). */
  maxConnections?: number
}

const CONNECT_TIMEOUT_MS = 30_000
const systemLookup: Lookup = (host) => dnsLookup(host, { all: true, verbatim: true })
// Hop-by-hop headers a proxy does not pass on (RFC 9110 §7.6.1), and the proxy's own.
const HOP = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'proxy-authorization',
  'proxy-authenticate',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
])

/** `host:port` of a CONNECT (an IPv6 host in brackets), or null. */
export function parseAuthority(target: string | undefined): { host: string; port: number } | null {
  const m = /^(\[[0-9a-fA-F:.%A-Za-z]+\]|[^:[\]/@\s]+):(\d{1,5})$/.exec(target ?? '')
  if (m?.[1] === undefined || m[2] === undefined) return null
  const port = Number(m[2])
  return port >= 1 && port <= 65535 ? { host: normalHost(m[1]), port } : null
}

/** Starts a proxy on a new Unix socket in a private directory (0711, the socket 0600 and its owner's). */
export async function startEgressProxy(o: ProxyOptions): Promise<EgressProxy> {
  const networks = parseNetworks(o.settings.allowedNetworks)
  const lookup = o.lookup ?? systemLookup
  const dir = mkdtempSync(join(tmpdir(), 'ctxagent-egress-'))
  chmodSync(dir, 0o711)
  const socket = join(dir, 'proxy.sock')
  const open = new Set<() => void>()
  let closing = false
  let drained: (() => void) | null = null

  /** One request's record (a CONNECT's, or a plain request's), written once when it ends; close() ends it early by destroying its connection. */
  const track = (method: string, host: string, port: number, client: Duplex) => {
    const started = Date.now()
    const r: ConnectionRecord = { by: o.by, method, host, port, address: null, allowed: false, reason: null, bytes_up: 0, bytes_down: 0, duration_ms: 0 }
    let done = false
    const stop = (): void => void client.destroy()
    const finish = (): void => {
      if (done) return
      done = true
      open.delete(stop)
      if (open.size === 0) drained?.()
      r.duration_ms = Date.now() - started
      try {
        o.log(r)
      } catch {
        // A task that can no longer be written (it was lost): the connection ends all the same.
      }
    }
    open.add(stop)
    if (open.size > (o.maxConnections ?? 256)) r.reason = `more than ${o.maxConnections ?? 256} connections at once`
    return { r, finish }
  }

  const server = createServer()
  server.on('connect', (req: IncomingMessage, client: Duplex, head: Buffer) => {
    const target = parseAuthority(req.url)
    const { r, finish } = track('CONNECT', target?.host ?? String(req.url ?? '').slice(0, 200), target?.port ?? 0, client)
    client.on('error', () => undefined)
    client.on('close', finish)
    if (target === null) return refuse(client, 400, (r.reason = 'not a host:port CONNECT target'))
    if (r.reason !== null) return refuse(client, 503, r.reason)
    void decide(target.host, o.settings, networks, lookup, o.isLocal)
      .then((d) => {
        r.address = d.address
        if (!d.ok) return refuse(client, 403, (r.reason = d.reason))
        if (client.destroyed) return void (r.reason = 'closed before the connection was made')
        r.allowed = true
        const up = connect({ host: d.address, port: target.port, family: d.family, timeout: CONNECT_TIMEOUT_MS })
        const count = () => {
          r.bytes_up = up.bytesWritten
          r.bytes_down = up.bytesRead
        }
        up.once('connect', () => {
          up.setTimeout(0)
          client.write('HTTP/1.1 200 Connection Established\r\n\r\n')
          if (head.length > 0) up.write(head)
          client.pipe(up)
          up.pipe(client)
        })
        up.once('timeout', () => up.destroy(new Error(`no answer from ${d.address}:${target.port} in ${CONNECT_TIMEOUT_MS / 1000} s`)))
        up.on('error', (err) => {
          r.reason ??= err.message
          if (!up.pending || client.destroyed) return
          refuse(client, 502, err.message)
        })
        up.on('close', () => {
          count()
          client.destroy()
        })
        client.on('close', () => {
          up.destroy()
          count()
        })
      })
      .catch((err: unknown) => refuse(client, 502, (r.reason = (err as Error).message)))
  })

  server.on('request', (req: IncomingMessage, res: ServerResponse) => {
    let url: URL | null = null
    try {
      url = new URL(req.url ?? '')
    } catch {
      // Not absolute: answered below.
    }
    const port = url === null ? 0 : url.port !== '' ? Number(url.port) : 80
    // Stopped through the connection, not the response: a response queued behind another's has no socket to destroy.
    const { r, finish } = track(req.method ?? 'GET', url === null ? String(req.url ?? '').slice(0, 200) : normalHost(url.hostname), port, req.socket)
    // A request pipelined behind another may never get a response of its own (its client
    // went away first): its record is written when the connection closes, all the same.
    const socket = req.socket
    const unanswered = (): void => {
      r.reason ??= 'the client closed the connection before it was answered'
      finish()
    }
    socket.once('close', unanswered)
    res.on('close', () => {
      socket.off('close', unanswered)
      finish()
    })
    if (url === null || url.protocol !== 'http:') return answer(res, 400, (r.reason = 'the proxy takes absolute http:// URLs, and https through CONNECT'))
    if (r.reason !== null) return answer(res, 503, r.reason)
    const path = `${url.pathname}${url.search}`
    void decide(url.hostname, o.settings, networks, lookup, o.isLocal)
      .then((d) => {
        r.address = d.address
        if (!d.ok) return answer(res, 403, (r.reason = d.reason))
        if (res.destroyed || req.socket.destroyed) return void (r.reason = 'closed before the connection was made')
        r.allowed = true
        const headers: OutgoingHttpHeaders = {}
        for (const [k, v] of Object.entries(req.headers)) if (!HOP.has(k) && v !== undefined) headers[k] = v
        // The host decided on, not another one at the same address (a CDN's other sites).
        headers.host = url.host
        headers.connection = 'close'
        const up = httpRequest({
          host: d.address,
          port,
          family: d.family,
          method: req.method,
          path,
          headers,
          agent: false,
          setHost: false,
          timeout: CONNECT_TIMEOUT_MS,
        })
        let sock: Socket | null = null
        up.on('socket', (s) => (sock = s))
        const count = () => {
          r.bytes_up = sock?.bytesWritten ?? 0
          r.bytes_down = sock?.bytesRead ?? 0
        }
        up.on('response', (upRes) => {
          up.setTimeout(0)
          const out: OutgoingHttpHeaders = {}
          for (const [k, v] of Object.entries(upRes.headers)) if (!HOP.has(k) && v !== undefined) out[k] = v
          res.writeHead(upRes.statusCode ?? 502, upRes.statusMessage, out)
          upRes.pipe(res)
          upRes.on('end', count)
        })
        up.once('timeout', () => up.destroy(new Error(`no answer from ${d.address}:${port} in ${CONNECT_TIMEOUT_MS / 1000} s`)))
        up.on('error', (err) => {
          r.reason ??= err.message
          count()
          if (!res.headersSent) answer(res, 502, err.message)
          else res.destroy()
        })
        res.on('close', () => {
          count()
          up.destroy()
        })
        req.pipe(up)
      })
      .catch((err: unknown) => answer(res, 502, (r.reason = (err as Error).message)))
  })

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject)
    server.listen(socket, () => resolve())
  })
  chmodSync(socket, 0o600)
  if (o.owner !== undefined && process.getuid?.() === 0) chownSync(socket, o.owner.uid, o.owner.gid)
  return {
    socket,
    close: async () => {
      if (closing) return
      closing = true
      const closed = new Promise<void>((resolve) => server.close(() => resolve()))
      // Every connection's record is written (on its close) before this returns.
      const allLogged = new Promise<void>((resolve) => (open.size === 0 ? resolve() : (drained = resolve)))
      for (const stop of [...open]) stop()
      server.closeAllConnections()
      await Promise.all([closed, allLogged])
      rmSync(dir, { recursive: true, force: true })
    },
  }
}

const body = (status: number, why: string) => `ctxagent egress proxy: ${status === 403 ? 'refused' : 'failed'}: ${why}\n`

/** A refusal on a CONNECT's socket: a whole HTTP answer, then the end. */
function refuse(client: Duplex, status: number, why: string): void {
  if (client.destroyed) return
  const text = body(status, why)
  const reason = status === 403 ? 'Forbidden' : status === 400 ? 'Bad Request' : status === 503 ? 'Service Unavailable' : 'Bad Gateway'
  client.end(
    `HTTP/1.1 ${status} ${reason}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: ${Buffer.byteLength(text)}\r\nConnection: close\r\n\r\n${text}`,
  )
}

/**
 * A refusal of a plain request. The connection stays open: a request pipelined behind this
 * one on it is answered in turn (node:http queues the answers in order), not dropped.
 */
function answer(res: ServerResponse, status: number, why: string): void {
  if (res.destroyed || res.headersSent) return
  const text = body(status, why)
  res.writeHead(status, { 'content-type': 'text/plain; charset=utf-8', 'content-length': Buffer.byteLength(text) })
  res.end(text)
}

/** A connection as the fields of its tools.jsonl record (records.ts's NetworkRecord). */
export function networkFields(r: ConnectionRecord) {
  return {
    arguments: { by: r.by, method: r.method, host: r.host, port: r.port },
    result: { allowed: r.allowed, address: r.address, bytes_up: r.bytes_up, bytes_down: r.bytes_down },
    status: r.allowed && r.reason === null ? ('success' as const) : ('error' as const),
    error: r.reason,
    duration_ms: r.duration_ms,
  }
}
