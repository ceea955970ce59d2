import { constants, createWriteStream, lstatSync, readdirSync, renameSync, statSync, unlinkSync, utimesSync } from 'node:fs'
import { open } from 'node:fs/promises'
import { join } from 'node:path'
import { pipeline } from 'node:stream/promises'
import { createGzip } from 'node:zlib'
import { fsyncDir, tempPathFor, unlinkQuietly } from '../fs/files.js'
import { FILES } from '../fs/layout.js'
import { blobFiles } from '../fs/layout.js'

export interface GzipResult {
  file: string
  before: number
  after: number
}

/** Files of a task that cleanup compresses (docs/contract.md §2.9), its blobs (`blobs/<id>`) too; metadata.json and state.json stay plain. */
export function archivableFiles(dir: string): string[] {
  // Regular files only: a link could lead out of the task directory, and a directory named *.jsonl is not data.
  const top = readdirSync(dir, { withFileTypes: true })
    .filter((e) => e.isFile() && (e.name.endsWith('.jsonl') || e.name === FILES.finalSummary))
    .map((e) => e.name)
  return [...top, ...blobFiles(dir).filter((name) => !name.endsWith('.gz'))]
}

/**
 * Compresses `<file>` to `<file>.gz` in place: stream into a temp file named for this
 * process (`<file>.gz.<pid>.<hex>.tmp`, so a later pass can tell a dead cleanup's) (memory stays
 * bounded whatever the size; zlib works on the thread pool, so several files at
 * once use several cores), fsync, rename, keep the original mtime, then remove the
 * original. A crash leaves either the original alone, or both (identical content),
 * never a half .gz under the final name.
 */
export async function gzipInPlace(path: string, level = 6): Promise<GzipResult> {
  const original = lstatSync(path)
  if (!original.isFile()) throw new Error(`${path} is not a regular file; left as it is`)
  const target = `${path}.gz`
  const tmp = tempPathFor(target)
  // 64 KiB deflate chunks: zlib's default 16 KiB halves throughput with thread-pool hops.
  try {
    // O_NOFOLLOW: a link swapped in since the listing is not followed out of the task.
    const source = await open(path, constants.O_RDONLY | constants.O_NOFOLLOW)
    await pipeline(source.createReadStream({ highWaterMark: 256 * 1024 }), createGzip({ level, chunkSize: 64 * 1024 }), createWriteStream(tmp, { mode: 0o600 }))
    // fsync on the thread pool: a synchronous flush here would stall every other file's stream.
    const handle = await open(tmp, 'r+')
    try {
      await handle.sync()
    } finally {
      await handle.close()
    }
    // Seconds as numbers, not Dates: a Date would cut the times to whole milliseconds.
    utimesSync(tmp, original.atimeMs / 1000, original.mtimeMs / 1000)
    renameSync(tmp, target)
  } catch (err) {
    // A full disk fails the write or the flush: the original stays, the temp goes.
    unlinkQuietly(tmp)
    throw err
  }
  unlinkSync(path)
  fsyncDir(join(path, '..'))
  return { file: path, before: original.size, after: statSync(target).size }
}

/** Removes `.gz.tmp` files that cleanups of earlier versions left behind in a task directory (today's temps name their pid). */
export function removeStaleTemps(dir: string): void {
  for (const name of readdirSync(dir)) if (name.endsWith('.gz.tmp')) unlinkQuietly(join(dir, name))
}

/** Runs `work` over `items` with at most `limit` at once. */
export async function eachLimit<T>(items: readonly T[], limit: number, work: (item: T) => Promise<void>): Promise<void> {
  let next = 0
  const worker = async () => {
    while (next < items.length) await work(items[next++] as T)
  }
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker))
}
