import { createReadStream } from 'node:fs'
import { createGunzip } from 'node:zlib'
import { RefusedImage } from './image-layer.js'
import { readTar } from './image-tar.js'
import type { TarMember } from './image-tar.js'

/*
 * A gzipped `docker save` archive (`docker save … | gzip`, docs/environments.md#an-image),
 * read as a stream through node:zlib: a gzip stream has no index, so the archive is read
 * through once to learn its members and its JSON (manifest, config), and once more for
 * each layer, in the manifest's order. Every pass counts the gunzipped bytes against the
 * image's limit and the members against its count: a gzip bomb stops at the bound, and
 * the tar reader's own bounds (sizes, extended headers) hold as for any layer.
 */

export interface ArchiveLimits {
  /** Gunzipped bytes one pass may read. */
  bytes: number
  /** Members the archive may hold. */
  members: number
}

/** A member's data is kept when it is JSON of at most this many bytes (docker's manifest, config, index). */
const MAX_JSON = 4 * 1024 * 1024
/** All kept JSON together: a hostile archive of many small JSON members is refused, not held. */
const MAX_KEPT = 16 * 1024 * 1024

const bytesText = (n: number): string => (n >= 1024 ** 3 ? `${n / 1024 ** 3} GiB` : `${n} bytes`)

/** The archive's bytes gunzipped, refused past `maxBytes`; the file and the gunzip are closed however the reader stops. */
async function* gunzipped(file: string, maxBytes: number): AsyncGenerator<Buffer> {
  const input = createReadStream(file)
  const gunzip = createGunzip()
  input.on('error', (err) => gunzip.destroy(err))
  input.pipe(gunzip)
  let read = 0
  try {
    for await (const chunk of gunzip as AsyncIterable<Buffer>) {
      read += chunk.length
      if (read > maxBytes) throw new RefusedImage(`the archive unpacks to more than ${bytesText(maxBytes)} (ctxagent's limit)`)
      yield chunk
    }
  } finally {
    input.destroy()
    gunzip.destroy()
  }
}

const key = (name: string): string => name.replace(/^\.\//, '')

async function drain(data: () => AsyncGenerator<Buffer>): Promise<void> {
  for await (const _ of data());
}

/** One pass: every member (by name, as a tar index has them) and the data of those that are small JSON. */
export async function scanGzipArchive(file: string, limits: ArchiveLimits): Promise<{ members: Map<string, TarMember>; json: Map<string, Buffer> }> {
  const members = new Map<string, TarMember>()
  const json = new Map<string, Buffer>()
  let kept = 0
  const source = gunzipped(file, limits.bytes)
  try {
    for await (const { member, data } of readTar(source)) {
      if (members.size >= limits.members) throw new RefusedImage(`the archive holds more than ${limits.members} members (ctxagent's limit)`)
      members.set(key(member.name), member)
      if (member.type !== 'file' || member.size > MAX_JSON || kept + member.size > MAX_KEPT) {
        await drain(data)
        continue
      }
      const parts: Buffer[] = []
      for await (const piece of data()) parts.push(piece)
      const bytes = Buffer.concat(parts)
      const first = bytes.toString('latin1').trimStart()[0]
      if (first === '{' || first === '[') {
        json.set(key(member.name), bytes)
        kept += bytes.length
      }
    }
  } finally {
    // readTar does not end its source when it is left early (a refusal): the file is closed here.
    await source.return(undefined)
  }
  return { members, json }
}

/** The data of the member named `name` (a file of the archive), read from the archive's start. */
export async function* gzipMember(file: string, name: string, limits: ArchiveLimits): AsyncGenerator<Buffer> {
  const source = gunzipped(file, limits.bytes)
  try {
    for await (const { member, data } of readTar(source)) {
      if (key(member.name) !== name) {
        await drain(data)
        continue
      }
      if (member.type !== 'file') throw new RefusedImage(`${name} is no longer a file of the archive`)
      yield* data()
      return
    }
  } finally {
    await source.return(undefined)
  }
  throw new RefusedImage(`${name} is no longer in the archive (was it changed while it was read?)`)
}
