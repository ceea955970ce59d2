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

/** A built-in that is required the first time the returned function is called, and kept. */
function atFirstUse<T>(name: string): () => T {
  let loaded: T | undefined
  return () => {
    loaded ??= load(name) as T
    return loaded
  }
}

export const nodeCrypto = atFirstUse<typeof import('node:crypto')>('node:crypto')
export const nodeZlib = atFirstUse<typeof import('node:zlib')>('node:zlib')
export const nodeFsPromises = atFirstUse<typeof import('node:fs/promises')>('node:fs/promises')
/** node:child_process: `ps`, where /proc is not (process-info.ts), never on `list`'s way on Linux. */
export const nodeChildProcess = atFirstUse<typeof import('node:child_process')>('node:child_process')
/** node:net as require() gives it: no ES namespace, whose getters load what isIP does not need. */
export const nodeNet = atFirstUse<typeof import('node:net')>('node:net')
