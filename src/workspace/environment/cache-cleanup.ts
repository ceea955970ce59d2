import { lstatSync, readdirSync, renameSync, rmSync, statSync } from 'node:fs'
import { join } from 'node:path'
import { readEntry, STALE_MS } from './cache-store.js'

// `cleanup`'s pass over the environment cache (docs/environments.md#the-cache): entries unused past an age, then the least recently used until the store fits its size.

export interface CacheEntry {
  dir: string
  bytes: number
  /** When a task last restored it (its directory's mtime, touched at each restore). */
  usedMs: number
}

export interface CachePlan {
  remove: (CacheEntry & { reason: 'age' | 'size' })[]
  keep: CacheEntry[]
}

/** Every complete entry of the store; a partial one being written, or one whose lock is held, is not listed. */
export function listEntries(store: string): CacheEntry[] {
  const entries: CacheEntry[] = []
  for (const repo of names(store)) {
    const repoDir = join(store, repo)
    for (const key of names(repoDir)) {
      const dir = join(repoDir, key)
      if (!/^[0-9a-f]{64}$/.test(key) || readEntry(dir) === null || lockedNow(dir)) continue
      entries.push({ dir, bytes: treeBytes(dir), usedMs: statSync(dir).mtimeMs })
    }
  }
  return entries
}

/** Which entries go: older than maxAgeMs since their last use, then the least recently used while the rest is over maxBytes. */
export function planCacheCleanup(entries: readonly CacheEntry[], maxAgeMs: number, maxBytes: number, nowMs: number): CachePlan {
  const byUse = [...entries].sort((a, b) => a.usedMs - b.usedMs)
  const remove: CachePlan['remove'] = []
  const keep: CacheEntry[] = []
  for (const e of byUse) nowMs - e.usedMs > maxAgeMs ? remove.push({ ...e, reason: 'age' }) : keep.push(e)
  let total = keep.reduce((n, e) => n + e.bytes, 0)
  while (total > maxBytes && keep.length > 0) {
    const oldest = keep.shift() as CacheEntry
    remove.push({ ...oldest, reason: 'size' })
    total -= oldest.bytes
  }
  return { remove, keep }
}

/** Removes an entry: renamed away first, so that a task looking for it either finds it whole or not at all. */
export function removeEntry(dir: string): void {
  const gone = `${dir}.removing-${process.pid}`
  try {
    renameSync(dir, gone)
  } catch {
    return
  }
  rmSync(gone, { recursive: true, force: true })
}

function lockedNow(dir: string): boolean {
  try {
    return Date.now() - statSync(`${dir}.lock`).mtimeMs < STALE_MS
  } catch {
    return false
  }
}

function names(dir: string): string[] {
  try {
    return readdirSync(dir)
  } catch {
    return []
  }
}

function treeBytes(path: string): number {
  const st = lstatSync(path)
  if (!st.isDirectory()) return st.size
  return names(path).reduce((n, name) => n + treeBytes(join(path, name)), st.size)
}
