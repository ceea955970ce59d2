import { readdirSync } from 'node:fs'
import { join } from 'node:path'

// What every task layout shares (docs/eval.md#a-suite): its limits, its hidden files, its repository.

export const MAX_STATEMENT = 64 * 1024
export const DEFAULT_CHECK_TIMEOUT_MS = 5 * 60_000

/** Regular files below `dir`, as paths relative to it; a link is refused (it would copy what it points at). */
export function filesUnder(dir: string, prefix = ''): string[] {
  return readdirSync(join(dir, prefix), { withFileTypes: true }).flatMap((e) => {
    const rel = prefix === '' ? e.name : `${prefix}/${e.name}`
    if (e.isDirectory()) return filesUnder(dir, rel)
    if (e.isFile()) return [rel]
    throw new Error(`tests/${rel} is not a regular file or directory`)
  })
}

/** A git URL (scheme://… or user@host:path), not a path. */
export function isUrl(repo: string): boolean {
  return /^[a-z][a-z0-9+.-]*:\/\//i.test(repo) || /^[^/]+@[^/]+:/.test(repo)
}
