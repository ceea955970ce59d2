import { closeSync, openSync, readdirSync, readSync, statSync } from 'node:fs'
import { join } from 'node:path'
import { isErrno } from '../../errors.js'

export interface DiskUse {
  /** Bytes on disk now. */
  bytes: number
  /** Bytes before gzip: plain files as they are, .gz files by their recorded original size. */
  raw: number
}

/**
 * Disk use of one task directory, its blobs/ included (long tool outputs, docs/contract.md §5). A
 * .gz file's original size is its gzip trailer (ISIZE, the size modulo 4 GiB), read
 * without decompressing anything.
 */
export function taskDiskUse(dir: string): DiskUse {
  const top = filesDiskUse(dir)
  const blobs = filesDiskUse(join(dir, 'blobs'))
  return { bytes: top.bytes + blobs.bytes, raw: top.raw + blobs.raw }
}

/** Disk use of the regular files directly in `dir` (none when it is missing). */
function filesDiskUse(dir: string): DiskUse {
  let names: string[]
  try {
    names = readdirSync(dir)
  } catch (err) {
    if (isErrno(err, 'ENOENT') || isErrno(err, 'ENOTDIR')) return { bytes: 0, raw: 0 }
    throw err
  }
  let bytes = 0
  let raw = 0
  for (const name of names) {
    let size: number
    try {
      const st = statSync(join(dir, name))
      if (!st.isFile()) continue
      size = st.size
    } catch (err) {
      if (isErrno(err, 'ENOENT')) continue
      throw err
    }
    bytes += size
    raw += name.endsWith('.gz') ? gzipOriginalSize(join(dir, name), size) : size
  }
  return { bytes, raw }
}

function gzipOriginalSize(path: string, size: number): number {
  if (size < 18) return size
  const fd = openSync(path, 'r')
  try {
    const trailer = Buffer.alloc(4)
    readSync(fd, trailer, 0, 4, size - 4)
    return trailer.readUInt32LE(0)
  } finally {
    closeSync(fd)
  }
}
