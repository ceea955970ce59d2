import { createHash } from 'node:crypto'
import { chmodSync, mkdirSync, mkdtempSync, readdirSync, realpathSync, rmSync, utimesSync } from 'node:fs'
import { basename, dirname, join } from 'node:path'
import { pipeline, Readable } from 'node:stream'
import { setTimeout as sleep } from 'node:timers/promises'
import { createGunzip } from 'node:zlib'
import type { ImageRecord } from '../../storage/task/state.js'
import type { SandboxIdentity } from '../../tools/sandbox/identity.js'
import { blockedAt } from '../../tools/sandbox/mcp-launch.js'
import { inside } from '../../tools/workspace.js'
import { commitEntry, entryDir, readEntry, tryLock } from './cache-store.js'
import { applyLayer, MAX_IMAGE_MEMBERS, RefusedImage, setDirModes } from './image-layer.js'
import type { Budget } from './image-layer.js'
import { directoryDigest } from './image-directory.js'
import { rememberScan } from './image-scan-memo.js'
import { readImageSource } from './image-source.js'
import type { Layer } from './image-source.js'

/*
 * An environment's image made ready (docs/environments.md#an-image): a directory is used
 * where it is; an OCI layout or a docker save archive is unpacked once into the
 * environment cache, under its content digest, by the one task that holds that entry's
 * lock (cache-store.ts), while the others wait and then use it. An entry is never changed
 * once written; the sandbox shows it read-only.
 */

const WAIT_MS = 500

const realOr = (p: string): string => {
  try {
    return realpathSync(p)
  } catch {
    return p
  }
}

const gib = (bytes: number): string => (bytes >= 1024 ** 3 ? `${bytes / 1024 ** 3} GiB` : `${bytes} bytes`)

/**
 * At most this many bytes of tar (gunzipped) in all an image's layers: a gzip layer of a
 * few MB can hold GBs of zeros, and the cache is on a disk every task shares.
 */
export const MAX_IMAGE_BYTES = 32 * 1024 ** 3

/** `key`: what a setup's result is kept under for this image (its content digest; a directory's file list's). */
export type ImageResult = { ok: true; root: string; record: ImageRecord; key: string } | { ok: false; error: string }

export interface ImageInput {
  /** The environment's `image`: an absolute path on this host. */
  path: string
  store: string
  /** As root, whom the sandbox runs as: the image must be theirs to read, its root theirs to reach. */
  identity: SandboxIdentity | null
  /** Places no sandbox may see: a directory image holding one is refused. */
  hidden: readonly string[]
  /**
   * The task's workspace (a real path): an image in it is refused, since an agent writes
   * there and a later task's setup (with its secrets) would run what it wrote.
   */
  workspace?: string
  signal?: AbortSignal
  /** Lower limits than MAX_IMAGE_BYTES and MAX_IMAGE_MEMBERS (tests). */
  limits?: { bytes: number; members: number }
}

export async function obtainImage(input: ImageInput): Promise<ImageResult> {
  const { path, identity } = input
  try {
    // Read as root, an image could be any file of the host: only one the sandbox's user could read itself is.
    const readable = (file: string): void => {
      const blocked = identity === null ? null : blockedAt(identity, file)
      if (blocked !== null)
        throw new RefusedImage(`${file} is not readable by ${identity?.name} (uid ${identity?.uid}), whom the sandbox runs as (at ${blocked})`)
    }
    readable(path)
    const real = realpathSync(path)
    // Inside a place the agent writes or no sandbox may see (through a link too): never an image.
    const within = [...(input.workspace !== undefined ? [input.workspace] : []), ...input.hidden].find((p) => inside(realOr(p), real))
    if (within !== undefined) throw new RefusedImage(`it lies in ${within}, which a task's commands write or must not see`)
    const limits = input.limits ?? { bytes: MAX_IMAGE_BYTES, members: MAX_IMAGE_MEMBERS }
    const source = await readImageSource(real, limits, readable, input.store)
    if (source.kind === 'directory') {
      const shown = input.hidden.find((h) => inside(source.root, h))
      if (shown !== undefined) throw new RefusedImage(`the directory ${source.root} holds ${shown}, which no sandbox may see`)
      // Keyed by its file list, not its path: a changed directory is another system (image-directory.ts).
      return {
        ok: true,
        root: source.root,
        record: { source: path, kind: 'directory', digest: null, cache: 'none' },
        key: directoryDigest(source.root, limits.members),
      }
    }
    const dir = entryDir(input.store, 'images', source.digest)
    const cache = await unpackOnce(dir, source.layers, input.signal, limits)
    const root = join(dir, 'paths')
    const unreachable = identity === null ? null : blockedAt(identity, root)
    if (unreachable !== null)
      return {
        ok: false,
        error: `the image's root ${root} cannot be reached by ${identity?.name} (uid ${identity?.uid}): make the directories above it searchable (chmod o+x ${unreachable}), or put the cache where it can (fleet.workspaces_dir)`,
      }
    // Its last use, for cleanup's age.
    const now = new Date()
    utimesSync(dir, now, now)
    // A gzipped archive read through here is not read again to learn its digest (image-scan-memo.ts).
    if (source.scanned !== undefined) rememberScan(input.store, source.scanned.identity, source.scanned.scan)
    return { ok: true, root, record: { source: path, kind: source.kind, digest: `sha256:${source.digest}`, cache }, key: `sha256:${source.digest}` }
  } catch (err) {
    if (err instanceof RefusedImage) return { ok: false, error: `the image ${path} is refused: ${err.message}` }
    return { ok: false, error: `the image ${path} could not be unpacked: ${(err as Error).message}` }
  }
}

/** The entry there already (`hit`), or unpacked by this task (`miss`), or by another this one waited for (`hit`). */
async function unpackOnce(dir: string, layers: Layer[], signal: AbortSignal | undefined, limits: { bytes: number; members: number }): Promise<'hit' | 'miss'> {
  for (;;) {
    if (readEntry(dir) !== null) return 'hit'
    if (signal?.aborted) throw new Error('stopped while waiting for another task unpacking the same image')
    const held = await tryLock(dir)
    if (held === null) {
      await sleep(WAIT_MS)
      continue
    }
    try {
      if (readEntry(dir) !== null) return 'hit'
      mkdirSync(dirname(dir), { recursive: true })
      leftBehind(dir)
      const root = mkdtempSync(`${dir}.unpack-`)
      try {
        const dirModes = new Map<string, number>()
        const budget = { ...limits, limit: limits.bytes, maxMembers: limits.members }
        for (const [i, layer] of layers.entries()) await unpackLayer(root, layer, i, dirModes, budget)
        setDirModes(root, dirModes)
        chmodSync(root, 0o755)
        commitEntry(dir, root, { created_at: new Date().toISOString(), setup_seconds: 0, bytes: 0 })
      } finally {
        rmSync(root, { recursive: true, force: true })
      }
      return 'miss'
    } finally {
      await held.release()
    }
  }
}

/**
 * What an unpacker that died (SIGKILL, a lost host) left of this entry: its half-unpacked
 * root, never used (only a complete entry, renamed into place with its entry.json, is),
 * removed by the next holder of the lock, so that it does not fill the store.
 */
function leftBehind(dir: string): void {
  const prefixes = [`${basename(dir)}.unpack-`, `${basename(dir)}.partial-`]
  for (const name of readdirSync(dirname(dir))) if (prefixes.some((p) => name.startsWith(p))) rmSync(join(dirname(dir), name), { recursive: true, force: true })
}

/** One layer applied to `root`, its bytes checked against its digest as they are read. */
async function unpackLayer(
  root: string,
  layer: Layer,
  i: number,
  dirModes: Map<string, number>,
  budget: Budget & { bytes: number; limit: number },
): Promise<void> {
  const stored = createHash('sha256')
  const tar = createHash('sha256')
  const bytes = checked(layer, stored, tar, budget)
  try {
    await applyLayer(root, bytes, dirModes, budget)
    // The archive's end: what follows its last member (padding) counts for the digest too.
    while ((await bytes.next()).done !== true);
  } catch (err) {
    await bytes.return(undefined).catch(() => undefined)
    if (err instanceof RefusedImage) throw new RefusedImage(`layer ${i + 1} (${layer.name}): ${err.message}`)
    throw new Error(`layer ${i + 1} (${layer.name}): ${(err as Error).message}`)
  }
}

/** The layer's tar bytes (gunzipped when stored as gzip), hashed as stored and as tar; its end checks the digest. */
async function* checked(
  layer: Layer,
  stored: ReturnType<typeof createHash>,
  tar: ReturnType<typeof createHash>,
  budget: { bytes: number; limit: number },
): AsyncGenerator<Buffer> {
  const input = layer.open()
  const hashed = (async function* () {
    for await (const chunk of input as AsyncIterable<Buffer>) {
      stored.update(chunk)
      yield chunk
    }
  })()
  const first = await hashed.next()
  const head = first.done === true ? Buffer.alloc(0) : first.value
  const all = (async function* () {
    if (head.length > 0) yield head
    yield* hashed
  })()
  const gzip = head[0] === 0x1f && head[1] === 0x8b
  let plain: AsyncIterable<Buffer> = all
  if (gzip) {
    const gunzip = createGunzip()
    // pipeline: a read error ends the gunzip's iteration with it.
    pipeline(Readable.from(all), gunzip, () => undefined)
    plain = gunzip
  }
  for await (const chunk of plain) {
    budget.bytes -= chunk.length
    if (budget.bytes < 0) throw new RefusedImage(`its layers unpack to more than ${gib(budget.limit)} of tar (ctxagent's limit)`)
    tar.update(chunk)
    yield chunk
  }
  const got = (layer.digest.of === 'stored' ? stored : tar).digest('hex')
  if (got !== layer.digest.hex) throw new RefusedImage(`its content does not match its digest (sha256:${layer.digest.hex.slice(0, 12)}…)`)
}

/**
 * The root of the image a task recorded (a resumed task, the test command after the
 * agent): its cache entry when it is still there, else the image obtained again, which
 * must have the digest the task started with.
 */
export async function recordedImage(record: ImageRecord, input: Omit<ImageInput, 'path'>): Promise<ImageResult> {
  const hex = record.digest?.replace(/^sha256:/, '') ?? null
  if (hex !== null && /^[0-9a-f]{64}$/.test(hex)) {
    const dir = entryDir(input.store, 'images', hex)
    if (readEntry(dir) !== null) return { ok: true, root: join(dir, 'paths'), record: { ...record, cache: 'hit' }, key: `sha256:${hex}` }
  }
  const again = await obtainImage({ ...input, path: record.source })
  if (again.ok && again.record.digest !== record.digest)
    return { ok: false, error: `the image ${record.source} is no longer the one the task started with (${record.digest ?? 'a directory'})` }
  return again
}
