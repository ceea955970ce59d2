import { createReadStream, createWriteStream, readdirSync, renameSync, statSync, unlinkSync, utimesSync } from 'node:fs'
import { open } from 'node:fs/promises'
import { join } from 'node:path'
import { pipeline } from 'node:stream/promises'
import { createGzip } from 'node:zlib'
import { fsyncDir, unlinkQuietly } from './files.js'
import { FILES } from './layout.js'

export interface GzipResult {
  file: string
  before: number
  after: number
}

/** Files of a task that cleanup compresses (SPEC §2.9); metadata.json and state.json stay plain. */
export function archivableFiles(dir: string): string[] {
  return readdirSync(dir).filter((name) => name.endsWith('.jsonl') || name === FILES.finalSummary)
}

/**
 * Compresses `<file>` to `<file>.gz` in place: stream into `.gz.tmp` (memory stays
 * bounded whatever the size; zlib works on the thread pool, so several files at
 * once use several cores), fsync, rename, keep the original mtime, then remove the
 * original. A crash leaves either the original alone, or both (identical content),
 * never a half .gz under the final name.
 */
export async function gzipInPlace(path: string, level = 6): Promise<GzipResult> {
  const original = statSync(path)
  const target = `${path}.gz`
  const tmp = `${target}.tmp`
  // 64 KiB deflate chunks: zlib's default 16 KiB halves throughput with thread-pool hops.
  await pipeline(createReadStream(path, { highWaterMark: 256 * 1024 }), createGzip({ level, chunkSize: 64 * 1024 }), createWriteStream(tmp, { mode: 0o600 }))
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
  unlinkSync(path)
  fsyncDir(join(path, '..'))
  return { file: path, before: original.size, after: statSync(target).size }
}

/** Removes `.gz.tmp` files a crash left behind in a task directory. */
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
