import { mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { commitEntry, entryDir, readEntry, sha } from './cache-store.js'
import type { MemberType, TarMember } from './image-tar.js'

/*
 * What one read through a gzipped `docker save` archive learnt (its members, its small
 * JSON: manifest and config), kept in the environment cache under the file's identity, so
 * that each later task using the archive learns its digest without gunzipping it again
 * (docs/environments.md#an-image). The identity is the file's device, inode, size,
 * modification and change times: any write, rename or chmod of the archive changes its
 * change time, which no user can set, so a changed archive is read again. It is taken
 * before the read: an archive changed while it was read is never recalled. The memo is
 * written only for an image that was obtained (its layers checked against their digests),
 * and it is an entry like the others: cleanup removes it by age and size.
 */

export interface GzipScan {
  members: Map<string, TarMember>
  json: Map<string, Buffer>
}

interface Stored {
  /** Each member under the name the archive's reader looks it up by. */
  members: [string, TarMember][]
  json: Record<string, string>
}

const STORE_NAME = 'image-scans'
const TYPES: readonly MemberType[] = ['file', 'dir', 'symlink', 'link', 'other']

/** The archive's identity (a hex key), or null when it cannot be read. */
export function archiveIdentity(file: string): string | null {
  try {
    const st = statSync(file, { bigint: true })
    return sha(`${file}\0${st.dev}:${st.ino}:${st.size}:${st.mtimeNs}:${st.ctimeNs}`)
  } catch {
    return null
  }
}

/** The scan kept for this identity, or null (none, or one that does not read as a scan). */
export function recalledScan(store: string, identity: string): GzipScan | null {
  const dir = entryDir(store, STORE_NAME, identity)
  if (readEntry(dir) === null) return null
  try {
    const stored = JSON.parse(readFileSync(join(dir, 'paths', 'scan.json'), 'utf8')) as Stored
    const members = new Map<string, TarMember>()
    for (const [at, m] of stored.members) {
      if (typeof at !== 'string' || typeof m.name !== 'string' || !TYPES.includes(m.type) || !Number.isSafeInteger(m.size) || m.size < 0) return null
      members.set(at, { name: m.name, type: m.type, flag: String(m.flag), mode: Number(m.mode), size: m.size, linkname: String(m.linkname) })
    }
    const json = new Map(Object.entries(stored.json).map(([name, b64]): [string, Buffer] => [name, Buffer.from(String(b64), 'base64')]))
    return { members, json }
  } catch {
    return null
  }
}

/** Keeps `scan` for this identity; a memo that cannot be written only costs the next task a read. */
export function rememberScan(store: string, identity: string, scan: GzipScan): void {
  const dir = entryDir(store, STORE_NAME, identity)
  if (readEntry(dir) !== null) return
  let paths: string | null = null
  try {
    mkdirSync(dirname(dir), { recursive: true })
    paths = mkdtempSync(`${dir}.scan-`)
    const stored: Stored = { members: [...scan.members], json: Object.fromEntries([...scan.json].map(([k, v]) => [k, v.toString('base64')])) }
    writeFileSync(join(paths, 'scan.json'), JSON.stringify(stored))
    commitEntry(dir, paths, { created_at: new Date().toISOString(), setup_seconds: 0, bytes: 0 })
  } catch {
    // The store full or not writable: the archive is read again next time.
  } finally {
    if (paths !== null) rmSync(paths, { recursive: true, force: true })
  }
}
