import { createRequire } from 'node:module'

/*
 * Node built-ins that cost a command's start-up when imported at the top of a module every
 * command loads, and that most commands never call (docs/development.md#start-up): loaded
 * here at their first use instead. `list` and `status` read task directories through the
 * same storage modules that `run` writes with. An import of node:crypto there loaded its ~20
 * internal modules for a temporary file name or a lock token that a read never makes,
 * node:zlib for a gzipped file that most reads never meet, and node:fs/promises for a
 * directory synced in the thread pool by writers only. node:net is loaded by Node itself, but
 * an ES import of it builds its namespace, whose getters load BlockList and SocketAddress: the
 * config's checks only call isIP. Together with chalk's node:process (scripts/bundle.mjs),
 * about 5 ms of `list`'s CPU.
 */

const load = createRequire(import.meta.url)

let crypto: typeof import('node:crypto') | undefined
let zlib: typeof import('node:zlib') | undefined
let fsPromises: typeof import('node:fs/promises') | undefined
let net: typeof import('node:net') | undefined

/** node:crypto, loaded the first time it is asked for. */
export function nodeCrypto(): typeof import('node:crypto') {
  crypto ??= load('node:crypto') as typeof import('node:crypto')
  return crypto
}

/** node:zlib, loaded the first time it is asked for. */
export function nodeZlib(): typeof import('node:zlib') {
  zlib ??= load('node:zlib') as typeof import('node:zlib')
  return zlib
}

/** node:fs/promises, loaded the first time it is asked for. */
export function nodeFsPromises(): typeof import('node:fs/promises') {
  fsPromises ??= load('node:fs/promises') as typeof import('node:fs/promises')
  return fsPromises
}

/** node:net as require() gives it (no ES namespace, whose getters load what isIP does not need). */
export function nodeNet(): typeof import('node:net') {
  net ??= load('node:net') as typeof import('node:net')
  return net
}
