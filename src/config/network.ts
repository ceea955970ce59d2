import { nodeNet } from '../lazy-builtins.js'

/*
 * The network settings' words, checked by the config schema and used by the sandbox's
 * egress proxy (src/tools/sandbox/egress-policy.ts); docs/security.md#the-network.
 */

/** tools.network (and mcp.servers.<name>.network): none, proxy or host; false and true are none and proxy. */
export const NETWORK_MODES = ['none', 'proxy', 'host'] as const
export type NetworkMode = (typeof NETWORK_MODES)[number]

export function networkMode(value: boolean | NetworkMode): NetworkMode {
  return value === true ? 'proxy' : value === false ? 'none' : value
}

/** `a.b.c.d/n` or `x::y/n` (a bare address is /32 or /128), or null. */
export function parseCidr(cidr: string): { address: string; prefix: number; type: 'ipv4' | 'ipv6' } | null {
  const [address = '', bits, extra] = cidr.split('/')
  const family = nodeNet().isIP(address)
  if (family === 0 || extra !== undefined) return null
  const max = family === 4 ? 32 : 128
  const prefix = bits === undefined ? max : /^\d{1,3}$/.test(bits) ? Number(bits) : -1
  if (prefix < 0 || prefix > max) return null
  return { address, prefix, type: family === 4 ? 'ipv4' : 'ipv6' }
}

/** A host as the proxy compares it: lower case, no trailing dot, an IPv6 literal without brackets. */
export function normalHost(host: string): string {
  return host
    .trim()
    .toLowerCase()
    .replace(/^\[(.*)\]$/, '$1')
    .replace(/\.$/, '')
}

/** tools.allowed_hosts entries: a name (`github.com`), `*.suffix` (`*.pypi.org`: its subdomains, not itself) or an IP literal. */
export function isHostPattern(entry: string): boolean {
  const e = normalHost(entry)
  if (nodeNet().isIP(e) !== 0) return true
  return /^(\*\.)?([a-z0-9_]([a-z0-9_-]*[a-z0-9_])?\.)*[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?$/.test(e) && e.length <= 253
}
