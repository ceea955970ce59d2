import { createHash } from 'node:crypto'
import { closeSync, createReadStream, existsSync, lstatSync, openSync, readFileSync, readSync, statSync } from 'node:fs'
import { join } from 'node:path'
import { Readable } from 'node:stream'
import { gzipMember, scanGzipArchive } from './image-gzip.js'
import type { ArchiveLimits } from './image-gzip.js'
import { RefusedImage, memberSteps } from './image-layer.js'
import { archiveIdentity, recalledScan } from './image-scan-memo.js'
import type { GzipScan } from './image-scan-memo.js'
import { indexTarFile } from './image-tar.js'
import type { Located, TarMember } from './image-tar.js'

/*
 * What an environment's `image` names (docs/environments.md#an-image): a root filesystem
 * directory used as it is, an OCI image layout, or a `docker save` archive (plain or
 * gzipped, image-gzip.ts), whose layers
 * are read from the file system (no daemon, no registry). An image is known by its
 * content digest: the manifest's (OCI) or that of docker's manifest and config; every
 * layer is checked against the digest its manifest gives while it is read, so the cache
 * entry of a digest holds that content and nothing else.
 */

export interface Layer {
  /** For messages: the blob or member it is. */
  name: string
  /** The layer's bytes as stored (compressed or not). */
  open: () => Readable
  /** The digest its bytes must have: as stored (OCI) or uncompressed (docker's diff_ids). */
  digest: { of: 'stored' | 'tar'; hex: string }
}

/**
 * `scanned`: a gzipped archive's read through, when this call made it (no memo recalled),
 * with the archive's identity taken before it, for the caller to keep once the image is
 * obtained (image-scan-memo.ts).
 */
export type ImageSource =
  | { kind: 'directory'; root: string }
  | { kind: 'oci' | 'docker-save'; digest: string; layers: Layer[]; scanned?: { identity: string; scan: GzipScan } }

const MAX_JSON = 4 * 1024 * 1024
const DIGEST = /^sha256:([0-9a-f]{64})$/

const sha256 = (data: Buffer): string => createHash('sha256').update(data).digest('hex')

/**
 * What `path` (absolute) is; refuses what is neither (a RefusedImage saying why).
 * `readable` is called with each file of an OCI layout before it is read (it throws for
 * one the sandbox's user could not read). `limits` bound a gzipped archive's passes.
 * `store`: the environment cache, where a gzipped archive's read through may be recalled.
 */
export async function readImageSource(
  path: string,
  limits: ArchiveLimits,
  readable: (file: string) => void = () => undefined,
  store: string | null = null,
): Promise<ImageSource> {
  let st: ReturnType<typeof statSync>
  try {
    st = statSync(path)
  } catch (err) {
    throw new RefusedImage(`${path} cannot be read (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`)
  }
  if (st.isDirectory()) {
    if (existsSync(join(path, 'oci-layout')) && existsSync(join(path, 'index.json'))) return ociLayout(path, readable)
    if (!['usr', 'bin'].some((top) => existsSync(join(path, top))))
      throw new RefusedImage(`${path} is neither a root file system (it has no usr or bin) nor an OCI image layout (no oci-layout and index.json)`)
    return { kind: 'directory', root: path }
  }
  if (!st.isFile()) throw new RefusedImage(`${path} is neither a directory nor a file`)
  return dockerSave(path, limits, store)
}

function json(text: Buffer, what: string): unknown {
  try {
    return JSON.parse(text.toString('utf8'))
  } catch {
    throw new RefusedImage(`${what} is not JSON`)
  }
}

function readSmall(path: string, what: string, readable: (file: string) => void): Buffer {
  const st = lstatSync(path, { throwIfNoEntry: false })
  if (st === undefined || !st.isFile()) throw new RefusedImage(`${what} is missing (or not a regular file)`)
  if (st.size > MAX_JSON) throw new RefusedImage(`${what} is larger than 4 MB`)
  readable(path)
  return readFileSync(path)
}

interface Descriptor {
  mediaType?: string
  digest?: string
  platform?: { os?: string; architecture?: string }
}

const ARCH: Record<string, string> = { x64: 'amd64', arm64: 'arm64' }

/** The one descriptor to follow: the only one, else the one for this host's platform. */
function pick(descriptors: Descriptor[], what: string): Descriptor {
  if (descriptors.length === 1) return descriptors[0] as Descriptor
  const mine = descriptors.filter((d) => d.platform?.os === 'linux' && d.platform.architecture === ARCH[process.arch])
  if (mine.length !== 1)
    throw new RefusedImage(`${what} lists ${descriptors.length} manifests and not exactly one for linux/${ARCH[process.arch] ?? process.arch}`)
  return mine[0] as Descriptor
}

/** A blob of the layout, named by its digest, read and checked against it. */
function blob(layout: string, digest: unknown, what: string, readable: (file: string) => void): { hex: string; bytes: Buffer } {
  const m = typeof digest === 'string' ? DIGEST.exec(digest) : null
  if (m === null) throw new RefusedImage(`${what} has no sha256 digest`)
  const hex = m[1] as string
  const bytes = readSmall(join(layout, 'blobs', 'sha256', hex), `${what}'s blob`, readable)
  if (sha256(bytes) !== hex) throw new RefusedImage(`${what}'s blob does not match its digest`)
  return { hex, bytes }
}

const ZSTD = /zstd/

function ociLayout(layout: string, readable: (file: string) => void): ImageSource {
  const index = json(readSmall(join(layout, 'index.json'), 'index.json', readable), 'index.json') as { manifests?: Descriptor[] }
  let descriptor = pick(index.manifests ?? [], 'index.json')
  // An image index (several platforms) under the layout's index: followed once.
  if (/image\.index|manifest\.list/.test(descriptor.mediaType ?? '')) {
    const nested = json(blob(layout, descriptor.digest, 'the image index', readable).bytes, 'the image index') as { manifests?: Descriptor[] }
    descriptor = pick(nested.manifests ?? [], 'the image index')
  }
  const manifest = blob(layout, descriptor.digest, 'the manifest', readable)
  const parsed = json(manifest.bytes, 'the manifest') as { layers?: Descriptor[] }
  if (!Array.isArray(parsed.layers) || parsed.layers.length === 0) throw new RefusedImage('the manifest lists no layers')
  const layers = parsed.layers.map((d, i): Layer => {
    if (ZSTD.test(d.mediaType ?? '')) throw new RefusedImage(`layer ${i + 1} is zstd-compressed (save the image with gzip layers)`)
    const m = typeof d.digest === 'string' ? DIGEST.exec(d.digest) : null
    if (m === null) throw new RefusedImage(`layer ${i + 1} has no sha256 digest`)
    const hex = m[1] as string
    const file = join(layout, 'blobs', 'sha256', hex)
    const st = lstatSync(file, { throwIfNoEntry: false })
    if (st === undefined || !st.isFile()) throw new RefusedImage(`layer ${i + 1}'s blob is missing (or not a regular file)`)
    readable(file)
    return { name: `blobs/sha256/${hex.slice(0, 12)}`, open: () => createReadStream(file), digest: { of: 'stored', hex } }
  })
  return { kind: 'oci', digest: manifest.hex, layers }
}

/** A member of the archive and its name, following its links (docker save links a repeated layer to the first). */
function member<T extends TarMember>(members: Map<string, T>, name: string, what: string): { at: string; found: T } {
  let at = memberSteps(name, what).join('/')
  for (let hops = 0; hops < 8; hops++) {
    const found = members.get(at)
    if (found === undefined) throw new RefusedImage(`${what} (${at}) is not in the archive`)
    if (found.type === 'file') return { at, found }
    if (found.type !== 'symlink') throw new RefusedImage(`${what} (${at}) is not a file`)
    const dir = at.split('/').slice(0, -1)
    at = memberSteps(found.linkname.startsWith('/') ? found.linkname : [...dir, found.linkname].join('/'), what).join('/')
  }
  throw new RefusedImage(`${what} is a chain of links`)
}

function readMember(file: string, m: Located, what: string): Buffer {
  if (m.size > MAX_JSON) throw new RefusedImage(`${what} is larger than 4 MB`)
  const fd = openSync(file, 'r')
  try {
    const data = Buffer.alloc(m.size)
    readSync(fd, data, 0, m.size, m.offset)
    return data
  } finally {
    closeSync(fd)
  }
}

/** An archive's members, a small member's bytes, and a layer member's stream: from the file (plain) or through gunzip. */
interface Archive {
  members: Map<string, TarMember>
  read: (name: string, what: string) => Buffer
  open: (name: string) => Readable
}

function plainArchive(file: string): Archive {
  let members: Map<string, Located>
  try {
    members = indexTarFile(file)
  } catch (err) {
    throw new RefusedImage(`${file} is not a tar archive (${(err as Error).message})`)
  }
  return {
    members,
    read: (name, what) => readMember(file, member(members, name, what).found, what),
    open: (name) => {
      const m = member(members, name, name).found
      return m.size === 0 ? createReadStream(file, { start: 1, end: 0 }) : createReadStream(file, { start: m.offset, end: m.offset + m.size - 1 })
    },
  }
}

/** A gzipped archive: its members and JSON recalled by the file's identity, else read through once (`fresh`). */
async function gzipArchive(file: string, limits: ArchiveLimits, store: string | null): Promise<Archive & { fresh?: { identity: string; scan: GzipScan } }> {
  const identity = archiveIdentity(file)
  const recalled = store !== null && identity !== null ? recalledScan(store, identity) : null
  let scanned: GzipScan
  try {
    scanned = recalled ?? (await scanGzipArchive(file, limits))
  } catch (err) {
    if (err instanceof RefusedImage) throw err
    throw new RefusedImage(`${file} is not a gzipped tar archive (${(err as Error).message})`)
  }
  return {
    ...(recalled === null && identity !== null ? { fresh: { identity, scan: scanned } } : {}),
    members: scanned.members,
    read: (name, what) => {
      const { at, found } = member(scanned.members, name, what)
      const bytes = scanned.json.get(at)
      if (bytes === undefined) throw new RefusedImage(found.size > MAX_JSON ? `${what} is larger than 4 MB` : `${what} is not JSON`)
      return bytes
    },
    open: (name) => Readable.from(gzipMember(file, name, limits)),
  }
}

async function dockerSave(file: string, limits: ArchiveLimits, store: string | null): Promise<ImageSource> {
  const head = Buffer.alloc(4)
  const fd = openSync(file, 'r')
  readSync(fd, head, 0, 4, 0)
  closeSync(fd)
  const archive: Archive & { fresh?: { identity: string; scan: GzipScan } } =
    head[0] === 0x1f && head[1] === 0x8b ? await gzipArchive(file, limits, store) : plainArchive(file)
  if (!archive.members.has('manifest.json')) throw new RefusedImage(`${file} is not a docker save archive (no manifest.json)`)
  const manifestBytes = archive.read('manifest.json', 'manifest.json')
  const manifest = json(manifestBytes, 'manifest.json') as { Config?: string; Layers?: string[] }[]
  if (!Array.isArray(manifest) || manifest.length !== 1)
    throw new RefusedImage(`${file} holds ${Array.isArray(manifest) ? manifest.length : 'no'} images (save exactly one)`)
  const [image] = manifest as [{ Config?: string; Layers?: string[] }]
  if (typeof image.Config !== 'string' || !Array.isArray(image.Layers) || image.Layers.length === 0)
    throw new RefusedImage('manifest.json names no config or no layers')
  const configBytes = archive.read(image.Config, 'the config')
  const diffIds = (json(configBytes, 'the config') as { rootfs?: { diff_ids?: unknown[] } }).rootfs?.diff_ids ?? []
  if (diffIds.length !== image.Layers.length) throw new RefusedImage(`the config lists ${diffIds.length} layer digests for ${image.Layers.length} layers`)
  const layers = image.Layers.map((name, i): Layer => {
    const { at } = member(archive.members, name, `layer ${i + 1}`)
    const d = typeof diffIds[i] === 'string' ? DIGEST.exec(diffIds[i] as string) : null
    if (d === null) throw new RefusedImage(`layer ${i + 1} has no sha256 digest in the config`)
    return { name, open: () => archive.open(at), digest: { of: 'tar', hex: d[1] as string } }
  })
  // The same digest gzipped or not: both are the one image, and share its cache entry.
  const digest = sha256(Buffer.concat([manifestBytes, Buffer.from('\0'), configBytes]))
  return { kind: 'docker-save', digest, layers, ...(archive.fresh !== undefined ? { scanned: archive.fresh } : {}) }
}
