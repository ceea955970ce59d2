import { createHash } from 'node:crypto'
import { lstatSync, readdirSync } from 'node:fs'
import { join } from 'node:path'
import { RefusedImage } from './image-layer.js'

/*
 * What a directory image is for a setup's cache key (docs/environments.md#an-image): not
 * its path, which stays the same while the operator changes what is in it (a new
 * toolchain, upgraded libraries), but a digest of its file list: each entry's path, type
 * and mode, size, modification time, inode and change time, read with lstat (a link is an
 * entry, never followed). A changed directory is a new key, so setup runs again in it
 * rather than a result made against the old system being restored. The change time is
 * the kernel's, which no one can set: an edit that keeps a file's size and puts its
 * modification time back (`touch -r`, `cp -p`, a tool that keeps times) still changes
 * it, and a file replaced by another is a new inode. File contents are not read: the
 * walk costs one lstat per entry, at each task's start. A copy of the directory, or a
 * chmod, is a new key too: setup runs once more, which is safe.
 */

/** `sha256:<hex>` of the directory's file list; refused past `maxEntries` entries. */
export function directoryDigest(root: string, maxEntries: number): string {
  const hash = createHash('sha256')
  let entries = 0
  const walk = (dir: string, rel: string): void => {
    // Sorted: the same tree lists the same, whatever order the file system returns.
    for (const name of readdirSync(dir).sort()) {
      entries += 1
      if (entries > maxEntries) throw new RefusedImage(`the directory holds more than ${maxEntries} entries (ctxagent's limit)`)
      const path = join(dir, name)
      const st = lstatSync(path, { bigint: true })
      const at = rel === '' ? name : `${rel}/${name}`
      hash.update(`${at}\0${st.mode}\0${st.size}\0${st.mtimeNs}\0${st.ino}\0${st.ctimeNs}\n`)
      if (st.isDirectory()) walk(path, at)
    }
  }
  walk(root, '')
  return `sha256:${hash.digest('hex')}`
}
