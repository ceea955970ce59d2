import { describe, expect, it } from 'vitest'
import {
  decide,
  embeddedIPv4,
  hostListed,
  isHostPattern,
  isThisHost,
  localAddresses,
  networkMode,
  parseCidr,
  parseNetworks,
  refusedRange,
} from '../../../src/tools/sandbox/egress-policy.js'
import type { Lookup } from '../../../src/tools/sandbox/egress-policy.js'

describe('the egress address policy', () => {
  it.each([
    ['127.0.0.1', 'loopback'],
    ['127.255.1.2', 'loopback'],
    ['0.0.0.0', 'this-network'],
    ['10.1.2.3', 'private'],
    ['172.16.0.1', 'private'],
    ['172.31.255.255', 'private'],
    ['192.168.1.1', 'private'],
    ['100.64.0.1', 'carrier-grade NAT'],
    ['100.127.255.254', 'carrier-grade NAT'],
    ['169.254.169.254', 'link-local'],
    ['224.0.0.1', 'multicast'],
    ['255.255.255.255', 'reserved'],
    ['::1', 'loopback'],
    ['::', 'unspecified'],
    ['::ffff:127.0.0.1', 'loopback (127.0.0.0/8), carried in ::ffff:127.0.0.1'],
    ['::ffff:7f00:1', 'loopback'],
    ['::ffff:169.254.169.254', 'link-local'],
    ['::ffff:a00:1', 'private (10.0.0.0/8)'],
    ['64:ff9b::10.0.0.1', 'private'],
    ['2002:7f00:1::', 'loopback'],
    ['fd00::1', 'unique-local'],
    ['fc12:3456::1', 'unique-local'],
    ['fe80::1', 'link-local'],
    ['fe80::1%eth0', 'link-local'],
    ['ff02::1', 'multicast'],
    ['::127.0.0.1', 'IPv4-compatible'],
  ])('refuses %s (%s)', (address, why) => {
    expect(refusedRange(address)).toContain(why)
  })

  it.each(['8.8.8.8', '1.1.1.1', '104.16.0.1', '172.32.0.1', '100.128.0.1', '2606:4700::1111', '2a00:1450:4001::1', '::ffff:8.8.8.8', '64:ff9b::8.8.8.8'])(
    'lets the public address %s through',
    (address) => {
      expect(refusedRange(address)).toBeNull()
    },
  )

  it('reads the IPv4 address carried in an IPv6 one', () => {
    expect(embeddedIPv4('::ffff:10.0.0.1')).toBe('10.0.0.1')
    expect(embeddedIPv4('::ffff:a00:1')).toBe('10.0.0.1')
    expect(embeddedIPv4('64:ff9b::7f00:1')).toBe('127.0.0.1')
    expect(embeddedIPv4('2002:c0a8:101::1')).toBe('192.168.1.1')
    expect(embeddedIPv4('2606:4700::1111')).toBeNull()
  })

  it('matches allowed_hosts exactly or by *.suffix, case and trailing dot aside', () => {
    const list = ['registry.npmjs.org', '*.pypi.org', 'GitHub.com']
    expect(hostListed('registry.npmjs.org', list)).toBe(true)
    expect(hostListed('REGISTRY.npmjs.org.', list)).toBe(true)
    expect(hostListed('files.pypi.org', list)).toBe(true)
    expect(hostListed('a.b.pypi.org', list)).toBe(true)
    expect(hostListed('pypi.org', list)).toBe(false)
    expect(hostListed('evilpypi.org', list)).toBe(false)
    expect(hostListed('github.com', list)).toBe(true)
    expect(hostListed('api.github.com', list)).toBe(false)
    expect(hostListed('registry.npmjs.org.evil.com', list)).toBe(false)
  })

  it('knows a host pattern and a network when it sees one', () => {
    for (const ok of ['github.com', '*.pypi.org', 'localhost', '10.0.0.1', '[::1]', 'a_b.example']) expect(isHostPattern(ok)).toBe(true)
    for (const bad of ['', '*', '*.', 'a..b', 'foo.*.com', 'http://x.com', 'x.com/path', 'x.com:443', '-a.com']) expect(isHostPattern(bad)).toBe(false)
    expect(parseCidr('10.0.0.0/8')).toEqual({ address: '10.0.0.0', prefix: 8, type: 'ipv4' })
    expect(parseCidr('fd00::1')).toEqual({ address: 'fd00::1', prefix: 128, type: 'ipv6' })
    for (const bad of ['10.0.0.0/33', '10.0.0/8', 'x/1', '10.0.0.1/8/1', '10.0.0.1/']) expect(parseCidr(bad)).toBeNull()
    expect(networkMode(false)).toBe('none')
    expect(networkMode(true)).toBe('proxy')
    expect(networkMode('host')).toBe('host')
  })
})

describe('a decision for one connection', () => {
  const dns: Record<string, string[]> = {
    'pkg.example': ['93.184.216.34'],
    'evil.example': ['127.0.0.1'],
    'mixed.example': ['10.0.0.1', '93.184.216.35'],
    'meta.example': ['::ffff:169.254.169.254'],
    'mirror.lan': ['10.9.8.7'],
  }
  const lookup: Lookup = async (host) => {
    const a = dns[host]
    if (a === undefined) throw Object.assign(new Error('not found'), { code: 'ENOTFOUND' })
    return a.map((address) => ({ address, family: address.includes(':') ? 6 : 4 }))
  }
  const none = parseNetworks([])
  const open = { allowedHosts: null, allowedNetworks: [] }

  it('connects to the address it resolved, refusing loopback, private and metadata answers', async () => {
    expect(await decide('pkg.example', open, none, lookup)).toEqual({ ok: true, address: '93.184.216.34', family: 4 })
    expect(await decide('evil.example', open, none, lookup)).toEqual({
      ok: false,
      address: '127.0.0.1',
      reason: 'evil.example resolves to 127.0.0.1, a loopback (127.0.0.0/8) address',
    })
    expect(await decide('meta.example', open, none, lookup)).toMatchObject({ ok: false, reason: expect.stringContaining('link-local') })
    // Of several answers, only a public one is used.
    expect(await decide('mixed.example', open, none, lookup)).toEqual({ ok: true, address: '93.184.216.35', family: 4 })
    expect(await decide('127.0.0.1', open, none, lookup)).toMatchObject({ ok: false, address: '127.0.0.1' })
    expect(await decide('[::1]', open, none, lookup)).toMatchObject({ ok: false, address: '::1' })
    expect(await decide('nowhere.example', open, none, lookup)).toEqual({ ok: false, address: null, reason: 'nowhere.example does not resolve (ENOTFOUND)' })
  })

  it('refuses a host allowed_hosts does not list before resolving it', async () => {
    let asked = 0
    const counting: Lookup = async (h) => (asked++, lookup(h))
    const listed = { allowedHosts: ['pkg.example', '*.example.org'], allowedNetworks: [] }
    expect(await decide('other.example', listed, none, counting)).toEqual({ ok: false, address: null, reason: 'other.example is not in tools.allowed_hosts' })
    expect(asked).toBe(0)
    expect(await decide('PKG.example.', listed, none, counting)).toMatchObject({ ok: true })
    // Listed, and still refused for where it leads.
    expect(await decide('evil.example', { ...listed, allowedHosts: ['evil.example'] }, none, counting)).toMatchObject({ ok: false, address: '127.0.0.1' })
  })

  it('never lets this host through: loopback, unspecified, its own interfaces, also carried in IPv6', async () => {
    const local = new Set(['10.9.8.7', '2001:db8::5'])
    for (const a of ['127.0.0.1', '127.3.2.1', '::1', '::', '0.0.0.0', '10.9.8.7', '::ffff:10.9.8.7', '::ffff:127.0.0.1', '2001:db8::5'])
      expect(isThisHost(a, local), a).toBe(true)
    for (const a of ['10.9.8.6', '93.184.216.34', '::2']) expect(isThisHost(a, local), a).toBe(false)
    expect(localAddresses().has('127.0.0.1')).toBe(true)
    // mirror.lan is 10.9.8.7: this host, here, so allowed_networks does not let it through.
    expect(await decide('mirror.lan', open, parseNetworks(['10.0.0.0/8']), lookup, (a) => isThisHost(a, local))).toEqual({
      ok: false,
      address: '10.9.8.7',
      reason: 'mirror.lan resolves to 10.9.8.7, an address of this host',
    })
    expect(await decide('127.0.0.1', open, parseNetworks(['127.0.0.0/8']), lookup)).toEqual({
      ok: false,
      address: '127.0.0.1',
      reason: '127.0.0.1 is a loopback (127.0.0.0/8) address',
    })
  })

  it('lets a private address through only inside allowed_networks', async () => {
    expect(await decide('mirror.lan', open, none, lookup)).toMatchObject({ ok: false, address: '10.9.8.7' })
    expect(await decide('mirror.lan', open, parseNetworks(['10.9.8.7/32']), lookup)).toEqual({ ok: true, address: '10.9.8.7', family: 4 })
    expect(await decide('evil.example', open, parseNetworks(['10.9.8.7/32']), lookup)).toMatchObject({ ok: false })
  })
})
