import { createHash } from 'node:crypto'
import { existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import lockfile from 'proper-lockfile'

/*
 * The environment cache (docs/environments.md#the-cache): one directory per repository,
 * environment and key on a store every host of a fleet sees. An entry is written once
 * (`paths/` then `entry.json`, renamed into place) and never changed after; a task gets a
 * private copy of it. One setup per key fleet-wide: the entry's lock (proper-lockfile: a
 * directory made atomically, its mtime refreshed while its holder lives) is taken by the
 * one that runs setup; the others wait for `entry.json`, and take the lock over once it is
 * stale (its holder died), to run setup themselves.
 */

export interface EntryRecord {
  created_at: string
  setup_seconds: number
  bytes: number
}

/** An entry's place: `<store>/<repository hash>/<key hash>`. */
export function entryDir(store: string, repository: string, key: string): string {
  return join(store, sha(repository).slice(0, 16), key)
}

export function sha(text: string | Buffer): string {
  return createHash('sha256').update(text).digest('hex')
}

/** The entry's record, when it is complete. */
export function readEntry(dir: string): EntryRecord | null {
  try {
    return JSON.parse(readFileSync(join(dir, 'entry.json'), 'utf8')) as EntryRecord
  } catch {
    return null
  }
}

/** A lock's mtime older than this is a dead holder's (it refreshes it every STALE_MS / 2). */
export const STALE_MS = 30_000

export type Held = { release: () => Promise<void>; lost: () => boolean }

/** The entry's lock, or null when another holds it (the caller waits, then tries again). */
export async function tryLock(dir: string): Promise<Held | null> {
  mkdirSync(join(dir, '..'), { recursive: true })
  let compromised = false
  try {
    const release = await lockfile.lock(dir, {
      realpath: false,
      stale: STALE_MS,
      update: STALE_MS / 2,
      lockfilePath: `${dir}.lock`,
      onCompromised: () => {
        compromised = true
      },
    })
    return { release: () => release().catch(() => undefined), lost: () => compromised }
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ELOCKED') return null
    throw err
  }
}

/** Moves a finished setup's `paths` (a directory holding the cache.paths) into place as the entry. */
export function commitEntry(dir: string, paths: string, record: EntryRecord): void {
  const partial = `${dir}.partial-${process.pid}`
  rmSync(partial, { recursive: true, force: true })
  mkdirSync(partial, { recursive: true })
  renameSync(paths, join(partial, 'paths'))
  writeFileSync(join(partial, 'entry.json'), `${JSON.stringify(record)}\n`)
  // An entry is never replaced: one left by an earlier setup that lost its lock stays as it is.
  if (existsSync(dir)) rmSync(partial, { recursive: true, force: true })
  else renameSync(partial, dir)
}
