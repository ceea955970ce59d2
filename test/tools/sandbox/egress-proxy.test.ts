import { createServer, request } from 'node:http'
import type { IncomingHttpHeaders, Server } from 'node:http'
import { connect } from 'node:net'
import type { AddressInfo } from 'node:net'
import { existsSync, statSync } from 'node:fs'
import { dirname } from 'node:path'
import { afterEach, describe, expect, it } from 'vitest'
import { parseAuthority, startEgressProxy } from '../../../src/tools/sandbox/egress-proxy.js'
import type { ConnectionRecord, EgressProxy } from '../../../src/tools/sandbox/egress-proxy.js'
import type { EgressSettings, Lookup } from '../../../src/tools/sandbox/egress-policy.js'

/*
 * The egress proxy on its own, over its Unix socket, as the forwarder inside a sandbox
 * reaches it. The upstream is a server on 127.0.0.1, which the proxy reaches only because
 * each test that wants it lets 127.0.0.1/32 in through allowed_networks and says (isLocal)
 * that it is not this host, which the proxy never reaches otherwise; names resolve
 * through a lookup the test gives. test/torture/hostile-network.test.ts runs the real
 * thing: a sandbox, the system's resolver and a server in a network namespace.
 */

const cleanups: (() => Promise<void> | void)[] = []
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c()
})

async function upstream(): Promise<{ port: number; seen: IncomingHttpHeaders[] }> {
  const seen: IncomingHttpHeaders[] = []
  const server: Server = createServer((req, res) => {
    seen.push(req.headers)
    let body = ''
    req.on('data', (d: Buffer) => (body += d.toString()))
    req.on('end', () => res.end(`hello ${req.method} ${req.url} ${body}`))
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  cleanups.push(() => new Promise<void>((resolve) => server.close(() => resolve())))
  return { port: (server.address() as AddressInfo).port, seen }
}

const lookup: Lookup = async (host) => {
  const table: Record<string, string> = { 'pkg.test': '127.0.0.1', 'far.test': '93.184.216.34' }
  const address = table[host]
  if (address === undefined) throw Object.assign(new Error('not found'), { code: 'ENOTFOUND' })
  return [{ address, family: 4 }]
}

async function proxyWith(settings: Partial<EgressSettings>, loopbackIsLocal = false): Promise<{ proxy: EgressProxy; records: ConnectionRecord[] }> {
  const records: ConnectionRecord[] = []
  const proxy = await startEgressProxy({
    settings: { allowedHosts: null, allowedNetworks: [], ...settings },
    by: 'run_command',
    log: (r) => records.push(r),
    lookup,
    ...(loopbackIsLocal ? {} : { isLocal: () => false }),
  })
  cleanups.push(() => proxy.close())
  return { proxy, records }
}

function get(socket: string, url: string, body = '', host = new URL(url).host): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    const req = request({ socketPath: socket, method: body ? 'POST' : 'GET', path: url, headers: { host } }, (res) => {
      let text = ''
      res.on('data', (d: Buffer) => (text += d.toString()))
      res.on('end', () => resolve({ status: res.statusCode ?? 0, text }))
    })
    req.on('error', reject)
    req.end(body)
  })
}

/** A CONNECT to `target`, then (when it is granted) one plain request through the tunnel; the whole answer. */
function tunnel(socket: string, target: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const c = connect(socket)
    let text = ''
    let sent = false
    c.on('data', (d: Buffer) => {
      text += d.toString()
      if (!sent && text.startsWith('HTTP/1.1 200')) {
        sent = true
        c.write(`GET /through HTTP/1.1\r\nHost: ${target}\r\nConnection: close\r\n\r\n`)
      }
    })
    c.on('end', () => resolve(text))
    c.on('error', reject)
    c.write(`CONNECT ${target} HTTP/1.1\r\nHost: ${target}\r\n\r\n`)
  })
}

const settle = async (records: ConnectionRecord[], n: number) => {
  for (let i = 0; i < 200 && records.length < n; i++) await new Promise((r) => setTimeout(r, 10))
}

describe('the egress proxy', () => {
  it('makes its socket 0600 in a private directory, and removes both when closed', async () => {
    const { proxy } = await proxyWith({})
    expect(statSync(proxy.socket).mode & 0o777).toBe(0o600)
    expect(statSync(dirname(proxy.socket)).mode & 0o777).toBe(0o711)
    await proxy.close()
    expect(existsSync(dirname(proxy.socket))).toBe(false)
  })

  it('carries plain HTTP and CONNECT to an allowed address, with the Host the client gave, and logs each connection', async () => {
    const up = await upstream()
    const { proxy, records } = await proxyWith({ allowedNetworks: ['127.0.0.1/32'] })
    expect(await get(proxy.socket, `http://pkg.test:${up.port}/hello?x=1`, 'body')).toEqual({ status: 200, text: 'hello POST /hello?x=1 body' })
    expect(up.seen[0]?.host).toBe(`pkg.test:${up.port}`)
    expect(up.seen[0]?.['proxy-connection']).toBeUndefined()
    const through = await tunnel(proxy.socket, `pkg.test:${up.port}`)
    expect(through).toMatch(/^HTTP\/1.1 200 Connection Established\r\n\r\nHTTP\/1.1 200 OK/)
    expect(through).toContain('hello GET /through')
    await settle(records, 2)
    expect(records).toEqual([
      expect.objectContaining({ by: 'run_command', method: 'POST', host: 'pkg.test', port: up.port, address: '127.0.0.1', allowed: true, reason: null }),
      expect.objectContaining({ method: 'CONNECT', host: 'pkg.test', port: up.port, address: '127.0.0.1', allowed: true, reason: null }),
    ])
    for (const r of records) {
      expect(r.bytes_up).toBeGreaterThan(30)
      expect(r.bytes_down).toBeGreaterThan(30)
    }
  })

  it('refuses loopback, an unlisted host, a name that does not resolve and a relative URL, saying why', async () => {
    const up = await upstream()
    const { proxy, records } = await proxyWith({ allowedHosts: ['pkg.test', 'far.test'] })
    expect(await get(proxy.socket, `http://pkg.test:${up.port}/`)).toEqual({
      status: 403,
      text: 'ctxagent egress proxy: refused: pkg.test resolves to 127.0.0.1, a loopback (127.0.0.0/8) address\n',
    })
    expect(await tunnel(proxy.socket, `127.0.0.1:${up.port}`)).toMatch(/^HTTP\/1.1 403 Forbidden\r\n[\s\S]*127.0.0.1 is not in tools.allowed_hosts\n$/)
    expect(await tunnel(proxy.socket, `other.test:443`)).toContain('other.test is not in tools.allowed_hosts')
    expect((await get(proxy.socket, 'https://far.test/')).status).toBe(400)
    expect(up.seen).toEqual([])
    await settle(records, 4)
    // Each is written when it ends: a refused request when it is answered, a refused tunnel when its client goes.
    expect(records.map((r) => [r.method, r.host, r.allowed])).toHaveLength(4)
    expect(records.map((r) => [r.method, r.host, r.allowed])).toEqual(
      expect.arrayContaining([
        ['GET', 'pkg.test', false],
        ['CONNECT', '127.0.0.1', false],
        ['CONNECT', 'other.test', false],
        ['GET', 'far.test', false],
      ]),
    )
  })

  it('never reaches this host, whatever allowed_networks says', async () => {
    const up = await upstream()
    const { proxy } = await proxyWith({ allowedNetworks: ['127.0.0.0/8', '0.0.0.0/0'] }, true)
    expect((await get(proxy.socket, `http://pkg.test:${up.port}/`)).text).toBe(
      'ctxagent egress proxy: refused: pkg.test resolves to 127.0.0.1, a loopback (127.0.0.0/8) address\n',
    )
    expect(await tunnel(proxy.socket, `[::ffff:127.0.0.1]:${up.port}`)).toContain(
      '::ffff:127.0.0.1 is a loopback (127.0.0.0/8), carried in ::ffff:127.0.0.1 address',
    )
    expect(up.seen).toEqual([])
  })

  it('sends the Host it decided on, whatever Host the client wrote (no reaching another site at the same address)', async () => {
    const up = await upstream()
    const { proxy } = await proxyWith({ allowedHosts: ['pkg.test'], allowedNetworks: ['127.0.0.1/32'] })
    expect((await get(proxy.socket, `http://pkg.test:${up.port}/`, '', 'unlisted.test')).status).toBe(200)
    expect(up.seen.map((h) => h.host)).toEqual([`pkg.test:${up.port}`])
  })

  it('answers 502 when an allowed host does not accept the connection, and logs the reason', async () => {
    const up = await upstream()
    const port = up.port
    await cleanups.pop()?.()
    const { proxy, records } = await proxyWith({ allowedNetworks: ['127.0.0.1/32'] })
    expect(await tunnel(proxy.socket, `pkg.test:${port}`)).toMatch(/^HTTP\/1.1 502 Bad Gateway[\s\S]*ECONNREFUSED/)
    await settle(records, 1)
    expect(records[0]).toMatchObject({ allowed: true, reason: expect.stringContaining('ECONNREFUSED') })
  })

  it('writes the record of a tunnel still open when it closes', async () => {
    const up = await upstream()
    const { proxy, records } = await proxyWith({ allowedNetworks: ['127.0.0.1/32'] })
    const c = connect(proxy.socket)
    c.on('error', () => undefined)
    await new Promise<void>((resolve) => {
      c.once('data', () => resolve())
      c.write(`CONNECT pkg.test:${up.port} HTTP/1.1\r\n\r\n`)
    })
    await proxy.close()
    expect(records).toEqual([expect.objectContaining({ method: 'CONNECT', allowed: true })])
  })

  it('answers every request pipelined on one connection, and writes the record of each (issue 40)', async () => {
    const { proxy, records } = await proxyWith({})
    const text = await new Promise<string>((resolve, reject) => {
      const c = connect(proxy.socket)
      let t = ''
      c.on('data', (d: Buffer) => {
        t += d.toString()
        if (t.split('refused:').length === 3) c.end()
      })
      c.on('close', () => resolve(t))
      c.on('error', reject)
      // Both at once, in one write: the second is read while the first is being decided.
      c.write('GET http://127.0.0.1:1/a HTTP/1.1\r\nHost: 127.0.0.1:1\r\n\r\nGET http://127.0.0.1:2/b HTTP/1.1\r\nHost: 127.0.0.1:2\r\n\r\n')
    })
    expect(text.match(/^HTTP\/1.1 403 Forbidden/gm)).toHaveLength(2)
    await settle(records, 2)
    expect(records.map((r) => [r.port, r.allowed, r.reason])).toEqual([
      [1, false, '127.0.0.1 is a loopback (127.0.0.0/8) address'],
      [2, false, '127.0.0.1 is a loopback (127.0.0.0/8) address'],
    ])
    await proxy.close()
  })

  it('writes the record of a request queued behind another when its client goes, and closes with one queued', async () => {
    // An upstream that holds its answer: the first request stays open, the second is queued behind it.
    const held: (() => void)[] = []
    const server: Server = createServer((_req, res) => void held.push(() => res.end('late')))
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
    cleanups.push(() => {
      for (const h of held) h()
      return new Promise<void>((resolve) => server.close(() => resolve()))
    })
    const port = (server.address() as AddressInfo).port
    const pipelined = `GET http://pkg.test:${port}/a HTTP/1.1\r\nHost: pkg.test:${port}\r\n\r\nGET http://nowhere.test:1/b HTTP/1.1\r\nHost: nowhere.test:1\r\n\r\n`
    const arrived = () => new Promise<void>((resolve) => (held.length > 0 ? resolve() : server.once('request', () => resolve())))

    // The client goes away with both unanswered: both records are written.
    const first = await proxyWith({ allowedNetworks: ['127.0.0.1/32'] })
    const c = connect(first.proxy.socket)
    c.on('error', () => undefined)
    c.write(pipelined)
    await arrived()
    c.destroy()
    await settle(first.records, 2)
    expect(first.records.map((r) => [r.method, r.port, r.allowed])).toEqual([
      ['GET', port, true],
      ['GET', 1, false],
    ])
    await first.proxy.close()

    // close() with a request queued behind an open one returns, both records written first.
    held.splice(0)
    const second = await proxyWith({ allowedNetworks: ['127.0.0.1/32'] })
    const d = connect(second.proxy.socket)
    d.on('error', () => undefined)
    d.write(pipelined)
    await arrived()
    await second.proxy.close()
    expect(second.records).toHaveLength(2)
  })

  it('reads a CONNECT target', () => {
    expect(parseAuthority('Example.com:443')).toEqual({ host: 'example.com', port: 443 })
    expect(parseAuthority('[::1]:8080')).toEqual({ host: '::1', port: 8080 })
    for (const bad of ['example.com', 'example.com:0', 'example.com:70000', 'a/b:1', 'user@h:1', undefined]) expect(parseAuthority(bad)).toBeNull()
  })
})
