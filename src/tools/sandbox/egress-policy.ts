import { BlockList, isIP, isIPv4 } from 'node:net'
import { networkInterfaces } from 'node:os'
import { normalHost, parseCidr } from '../../config/network.js'

export { isHostPattern, NETWORK_MODES, networkMode, normalHost, parseCidr } from '../../config/network.js'
export type { NetworkMode } from '../../config/network.js'

/*
 * What the egress proxy (egress-proxy.ts) lets a sandboxed command reach, decided on the
 * address a name resolves to, never on the name alone: a name that resolves to this
 * host, its LAN or a cloud's metadata service is refused however it is spelled. The
 * whole policy is in docs/security.md#the-network.
 */

/** Ranges no command reaches through the proxy, with the word a refusal uses. */
const RANGES: [string, number, 'ipv4' | 'ipv6', string][] = [
  ['0.0.0.0', 8, 'ipv4', 'this-network (0.0.0.0/8)'],
  ['10.0.0.0', 8, 'ipv4', 'private (10.0.0.0/8)'],
  ['100.64.0.0', 10, 'ipv4', 'carrier-grade NAT (100.64.0.0/10)'],
  ['127.0.0.0', 8, 'ipv4', 'loopback (127.0.0.0/8)'],
  ['169.254.0.0', 16, 'ipv4', 'link-local (169.254.0.0/16, cloud metadata)'],
  ['172.16.0.0', 12, 'ipv4', 'private (172.16.0.0/12)'],
  ['192.0.0.0', 24, 'ipv4', 'IETF protocol assignments (192.0.0.0/24)'],
  ['192.0.2.0', 24, 'ipv4', 'documentation (192.0.2.0/24)'],
  ['192.168.0.0', 16, 'ipv4', 'private (192.168.0.0/16)'],
  ['198.18.0.0', 15, 'ipv4', 'benchmarking (198.18.0.0/15)'],
  ['198.51.100.0', 24, 'ipv4', 'documentation (198.51.100.0/24)'],
  ['203.0.113.0', 24, 'ipv4', 'documentation (203.0.113.0/24)'],
  ['224.0.0.0', 4, 'ipv4', 'multicast (224.0.0.0/4)'],
  ['240.0.0.0', 4, 'ipv4', 'reserved (240.0.0.0/4, broadcast)'],
  ['::', 96, 'ipv6', 'unspecified, loopback or IPv4-compatible (::/96)'],
  ['64:ff9b:1::', 48, 'ipv6', 'local-use NAT64 (64:ff9b:1::/48)'],
  ['100::', 64, 'ipv6', 'discard (100::/64)'],
  ['2001:db8::', 32, 'ipv6', 'documentation (2001:db8::/32)'],
  ['fc00::', 7, 'ipv6', 'unique-local (fc00::/7)'],
  ['fe80::', 10, 'ipv6', 'link-local (fe80::/10)'],
  ['fec0::', 10, 'ipv6', 'site-local (fec0::/10)'],
  ['ff00::', 8, 'ipv6', 'multicast (ff00::/8)'],
]

const lists = RANGES.map(([net, prefix, type, why]) => {
  const list = new BlockList()
  list.addSubnet(net, prefix, type)
  return { list, type, why }
})

/**
 * The IPv4 address an IPv6 one carries to an IPv4 host (mapped ::ffff:a.b.c.d, NAT64
 * 64:ff9b::a.b.c.d, 6to4 2002:AABB:CCDD::), or null.
 */
export function embeddedIPv4(address: string): string | null {
  const words = ipv6Words(address)
  if (words === null) return null
  const v4 = (hi: number, lo: number) => `${hi >> 8}.${hi & 255}.${lo >> 8}.${lo & 255}`
  const zero = (from: number, to: number) => words.slice(from, to).every((w) => w === 0)
  if (zero(0, 5) && words[5] === 0xffff) return v4(words[6] ?? 0, words[7] ?? 0)
  if (words[0] === 0x64 && words[1] === 0xff9b && zero(2, 6)) return v4(words[6] ?? 0, words[7] ?? 0)
  if (words[0] === 0x2002) return v4(words[1] ?? 0, words[2] ?? 0)
  return null
}

/** The eight 16-bit words of an IPv6 address (dotted IPv4 tail allowed), or null. */
function ipv6Words(address: string): number[] | null {
  if (isIP(address) !== 6) return null
  let text = address.split('%')[0] ?? ''
  const dotted = /(\d+\.\d+\.\d+\.\d+)$/.exec(text)
  if (dotted?.[1] !== undefined) {
    const [a = 0, b = 0, c = 0, d = 0] = dotted[1].split('.').map(Number)
    text = `${text.slice(0, -dotted[1].length)}${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`
  }
  const [head = '', tail] = text.split('::')
  const part = (s: string) => (s === '' ? [] : s.split(':').map((w) => parseInt(w, 16)))
  const left = part(head)
  const right = tail === undefined ? [] : part(tail)
  const fill = tail === undefined ? [] : new Array<number>(8 - left.length - right.length).fill(0)
  const words = [...left, ...fill, ...right]
  return words.length === 8 ? words : null
}

/**
 * Why `address` (an IP literal) is refused, or null when it is a public address. An
 * IPv6 address carrying an IPv4 one is judged by that one too.
 */
export function refusedRange(address: string): string | null {
  const family = isIP(address)
  if (family === 0) return 'not an IP address'
  const type = family === 4 ? 'ipv4' : 'ipv6'
  const plain = type === 'ipv6' ? (address.split('%')[0] ?? address) : address
  for (const r of lists) if (r.type === type && r.list.check(plain, type)) return r.why
  const inner = type === 'ipv6' ? embeddedIPv4(plain) : null
  if (inner !== null) {
    const why = refusedRange(inner)
    if (why !== null) return `${why}, carried in ${plain}`
  }
  return null
}

/** tools.allowed_networks: CIDRs an operator lets the proxy reach although they are private (a package mirror on the LAN). */
export function parseNetworks(cidrs: readonly string[]): BlockList {
  const list = new BlockList()
  for (const cidr of cidrs) {
    const parsed = parseCidr(cidr)
    if (parsed === null) throw new Error(`not a network: ${cidr}`)
    list.addSubnet(parsed.address, parsed.prefix, parsed.type)
  }
  return list
}

/** Whether `host` is listed: exactly, or under a `*.suffix` entry. */
export function hostListed(host: string, patterns: readonly string[]): boolean {
  const h = normalHost(host)
  return patterns.some((p) => {
    const e = normalHost(p)
    return e.startsWith('*.') ? h.endsWith(e.slice(1)) && h.length > e.length - 1 : h === e
  })
}

const thisHost = new BlockList()
thisHost.addSubnet('127.0.0.0', 8, 'ipv4')
thisHost.addSubnet('0.0.0.0', 8, 'ipv4')
thisHost.addAddress('::1', 'ipv6')
thisHost.addAddress('::', 'ipv6')

/** This host's own addresses (every interface's): a service listening on all of them answers on each. */
export function localAddresses(): Set<string> {
  return new Set(Object.values(networkInterfaces()).flatMap((list) => (list ?? []).map((i) => (i.address.split('%')[0] ?? i.address).toLowerCase())))
}

/**
 * Whether `address` is this host: loopback, unspecified, or one of `local` (its
 * interfaces' addresses), also when carried in an IPv6 address. Never let through,
 * whatever tools.allowed_networks says.
 */
export function isThisHost(address: string, local: ReadonlySet<string>): boolean {
  const plain = (address.split('%')[0] ?? address).toLowerCase()
  const inner = isIP(plain) === 6 ? embeddedIPv4(plain) : null
  for (const a of inner !== null ? [plain, inner] : [plain]) {
    if (local.has(a) || thisHost.check(a, isIP(a) === 4 ? 'ipv4' : 'ipv6')) return true
  }
  return false
}

export interface EgressSettings {
  /** null: any public host; a list: only these. */
  allowedHosts: readonly string[] | null
  /** Private ranges let through all the same (tools.allowed_networks). */
  allowedNetworks: readonly string[]
}

export type Lookup = (host: string) => Promise<{ address: string; family: number }[]>

export type Decision = { ok: true; address: string; family: 4 | 6 } | { ok: false; address: string | null; reason: string }

/**
 * The decision for one connection to `host`: refused when allowed_hosts does not list
 * it, else resolved (a literal is its own address) and refused when no address it
 * resolves to is public or in allowed_networks, or when it is this host (`isLocal`:
 * loopback or its interfaces' addresses); else the first that passes, which the proxy connects to as it
 * is (no second lookup a rebinding server could answer).
 */
export async function decide(
  host: string,
  settings: EgressSettings,
  networks: BlockList,
  lookup: Lookup,
  isLocal: (address: string) => boolean = (a) => isThisHost(a, localAddresses()),
): Promise<Decision> {
  const name = normalHost(host)
  if (name === '') return { ok: false, address: null, reason: 'no host' }
  if (settings.allowedHosts !== null && !hostListed(name, settings.allowedHosts))
    return { ok: false, address: null, reason: `${name} is not in tools.allowed_hosts` }
  let addresses: { address: string; family: number }[]
  if (isIP(name) !== 0) addresses = [{ address: name, family: isIP(name) }]
  else {
    try {
      addresses = await lookup(name)
    } catch (err) {
      return { ok: false, address: null, reason: `${name} does not resolve (${(err as NodeJS.ErrnoException).code ?? 'lookup failed'})` }
    }
  }
  let first: { address: string; why: string } | null = null
  for (const { address } of addresses) {
    const type = isIPv4(address) ? 'ipv4' : 'ipv6'
    const range = refusedRange(address)
    const local = isLocal(address)
    const letThrough = range === null || networks.check(address, type)
    if (letThrough && !local) return { ok: true, address, family: type === 'ipv4' ? 4 : 6 }
    // Loopback is said as such; a LAN address allowed_networks lets through is refused for being this host's.
    const plainly = range !== null && (!letThrough || /^(loopback|unspecified|this-network)/.test(range))
    first ??= { address, why: plainly ? `a ${range} address` : 'an address of this host' }
  }
  if (first === null) return { ok: false, address: null, reason: `${name} has no address` }
  return {
    ok: false,
    address: first.address,
    reason: name === first.address ? `${name} is ${first.why}` : `${name} resolves to ${first.address}, ${first.why}`,
  }
}
