import { closeSync, openSync, readSync } from 'node:fs'

/*
 * A tar reader for an image's layers (docs/environments.md#an-image). No tar library is
 * in package.json, and system tar decides for itself what to do with a member (follow a
 * link an earlier layer left, make a device as root): here every member is a value the
 * unpacker judges before anything is written. ustar with GNU long names (L, K) and pax
 * headers (x: path, linkpath, size); base-256 sizes.
 */

export type MemberType = 'file' | 'dir' | 'symlink' | 'link' | 'other'

export interface TarMember {
  name: string
  type: MemberType
  /** The header's type flag ('3' a character device, '6' a FIFO…), for what `other` was. */
  flag: string
  mode: number
  size: number
  /** A link's target (symlink) or the member it names (hard link). */
  linkname: string
}

export const BLOCK = 512

/**
 * A number field: octal text, or base-256 when its first byte has the high bit. NaN for
 * what is neither, a negative one (0xff: base-256's sign) or one past 2^53: a size must be
 * exact, or the next header would be read from inside a member's data.
 */
function numberAt(block: Buffer, start: number, length: number): number {
  const field = block.subarray(start, start + length)
  if (((field[0] ?? 0) & 0x80) !== 0) {
    if (field[0] === 0xff) return Number.NaN
    let n = (field[0] ?? 0) & 0x7f
    for (const byte of field.subarray(1)) n = n * 256 + byte
    return Number.isSafeInteger(n) ? n : Number.NaN
  }
  const text = field
    .toString('latin1')
    .replace(/[\0 ]+$/, '')
    .trim()
  return text === '' ? 0 : /^[0-7]+$/.test(text) ? Number.parseInt(text, 8) : Number.NaN
}

/** A member's size, refused unless it is a whole number of bytes a file can have. */
function sizeOf(n: number, name: string): number {
  if (!Number.isSafeInteger(n) || n < 0) throw new Error(`a tar header with a bad size for ${JSON.stringify(name)}`)
  return n
}

function textAt(block: Buffer, start: number, length: number): string {
  const field = block.subarray(start, start + length)
  const end = field.indexOf(0)
  return field.subarray(0, end === -1 ? field.length : end).toString('utf8')
}

const TYPES: Record<string, MemberType> = { '0': 'file', '\0': 'file', '7': 'file', '1': 'link', '2': 'symlink', '5': 'dir' }

/** One header block, or null for the zero block that ends an archive; throws for a damaged one. */
export function parseHeader(block: Buffer): TarMember | null {
  if (block.every((b) => b === 0)) return null
  let sum = 0
  for (let i = 0; i < BLOCK; i++) sum += i >= 148 && i < 156 ? 0x20 : (block[i] ?? 0)
  if (numberAt(block, 148, 8) !== sum) throw new Error('a tar header with a wrong checksum (not a tar archive, or a damaged one)')
  const flag = String.fromCharCode(block[156] ?? 0)
  let name = textAt(block, 0, 100)
  // POSIX ustar's prefix field; GNU's own magic ("ustar  ") uses those bytes for other things.
  if (block.subarray(257, 263).toString('latin1') === 'ustar\0') {
    const prefix = textAt(block, 345, 155)
    if (prefix !== '') name = `${prefix}/${name}`
  }
  const mode = numberAt(block, 100, 8)
  return {
    name,
    type: TYPES[flag] ?? 'other',
    flag,
    mode: Number.isNaN(mode) ? 0 : mode,
    size: sizeOf(numberAt(block, 124, 12), name),
    linkname: textAt(block, 157, 100),
  }
}

/** The records of a pax header ("LEN key=value\n"…) that matter here. */
function paxRecords(data: Buffer): Partial<Record<'path' | 'linkpath' | 'size', string>> {
  const out: Partial<Record<'path' | 'linkpath' | 'size', string>> = {}
  let at = 0
  while (at < data.length) {
    const space = data.indexOf(0x20, at)
    if (space === -1) break
    const length = Number.parseInt(data.subarray(at, space).toString('latin1'), 10)
    if (!Number.isFinite(length) || length <= 0) break
    const record = data.subarray(space + 1, at + length - 1).toString('utf8')
    const eq = record.indexOf('=')
    const key = record.slice(0, eq)
    if (key === 'path' || key === 'linkpath' || key === 'size') out[key] = record.slice(eq + 1)
    at += length
  }
  return out
}

/** Headers that describe the member after them (GNU long names, pax). */
const META = new Set(['L', 'K', 'x', 'g'])

const padded = (size: number): number => Math.ceil(size / BLOCK) * BLOCK

/** What the headers before a member (L, K, x) say about it. */
interface Pending {
  name?: string
  linkname?: string
  size?: number
}

function applyPending(member: TarMember, pending: Pending): TarMember {
  return { ...member, name: pending.name ?? member.name, linkname: pending.linkname ?? member.linkname, size: pending.size ?? member.size }
}

/** Whether a header is one that describes the next member (returns what it says), else null. */
function describesNext(flag: string, data: Buffer, pending: Pending): Pending | null {
  if (flag === 'L') return { ...pending, name: textAt(data, 0, data.length) }
  if (flag === 'K') return { ...pending, linkname: textAt(data, 0, data.length) }
  if (flag === 'x') {
    const pax = paxRecords(data)
    return {
      ...pending,
      ...(pax.path !== undefined ? { name: pax.path } : {}),
      ...(pax.linkpath !== undefined ? { linkname: pax.linkpath } : {}),
      // Decimal digits only: Number() would take '-1', '0x10', '1e3' or ' '.
      ...(pax.size !== undefined ? { size: sizeOf(/^\d+$/.test(pax.size) ? Number(pax.size) : Number.NaN, pax.path ?? pending.name ?? 'a pax header') } : {}),
    }
  }
  if (flag === 'g') return pending
  return null
}

/** Reads exactly `n` bytes from a stream of chunks, or fewer at its end. */
class Bytes {
  private chunks: Buffer[] = []
  private held = 0
  private done = false
  constructor(private readonly source: AsyncIterator<Buffer>) {}

  private async fill(n: number): Promise<void> {
    while (this.held < n && !this.done) {
      const next = await this.source.next()
      if (next.done === true) this.done = true
      else {
        this.chunks.push(next.value)
        this.held += next.value.length
      }
    }
  }

  async take(n: number): Promise<Buffer> {
    await this.fill(n)
    // Only the chunks the n bytes lie in are joined: a header is not a copy of all that is held.
    const parts: Buffer[] = []
    let got = 0
    while (got < n && this.chunks.length > 0) {
      const first = this.chunks.shift() as Buffer
      const piece = first.subarray(0, n - got)
      if (piece.length < first.length) this.chunks.unshift(first.subarray(piece.length))
      parts.push(piece)
      got += piece.length
    }
    this.held -= got
    return parts.length === 1 ? (parts[0] as Buffer) : Buffer.concat(parts)
  }

  /** Up to `max` bytes (at least one unless the stream ended). */
  async some(max: number): Promise<Buffer> {
    await this.fill(1)
    const first = this.chunks.shift()
    if (first === undefined) return Buffer.alloc(0)
    const out = first.subarray(0, max)
    if (first.length > max) this.chunks.unshift(first.subarray(max))
    this.held -= out.length
    return out
  }
}

/**
 * The members of a tar stream in order, each with its data: `data` must be read to its
 * end (or not at all) before the next member is asked for; what is left is skipped.
 */
export async function* readTar(source: AsyncIterable<Buffer>): AsyncGenerator<{ member: TarMember; data: () => AsyncGenerator<Buffer> }> {
  const bytes = new Bytes(source[Symbol.asyncIterator]())
  let pending: Pending = {}
  for (;;) {
    const block = await bytes.take(BLOCK)
    if (block.length === 0) return
    if (block.length < BLOCK) throw new Error('a tar archive that ends inside a header')
    const header = parseHeader(block)
    if (header === null) return
    const plain = header
    const raw = header.flag
    if (META.has(raw)) {
      if (plain.size > 1024 * 1024) throw new Error('a tar extended header larger than 1 MB')
      const data = await bytes.take(padded(plain.size))
      pending = describesNext(raw, data.subarray(0, plain.size), pending) ?? pending
      continue
    }
    const member = applyPending(plain, pending)
    pending = {}
    const hasData = member.type === 'file' || member.type === 'other'
    let left = hasData ? member.size : 0
    const data = async function* (): AsyncGenerator<Buffer> {
      while (left > 0) {
        const piece = await bytes.some(Math.min(left, 1024 * 1024))
        if (piece.length === 0) throw new Error(`a tar archive that ends inside ${member.name}`)
        left -= piece.length
        yield piece
      }
    }
    yield { member, data }
    while (left > 0) {
      const piece = await bytes.some(Math.min(left, 1024 * 1024))
      if (piece.length === 0) throw new Error(`a tar archive that ends inside ${member.name}`)
      left -= piece.length
    }
    const pad = padded(hasData ? member.size : 0) - (hasData ? member.size : 0)
    if (pad > 0) await bytes.take(pad)
  }
}

/** Where a member's data is in an uncompressed tar file (a `docker save` archive). */
export interface Located extends TarMember {
  offset: number
}

/** Every member of an uncompressed tar file with its data's offset, reading only headers (and long names). */
export function indexTarFile(path: string): Map<string, Located> {
  const fd = openSync(path, 'r')
  const found = new Map<string, Located>()
  try {
    const block = Buffer.alloc(BLOCK)
    let at = 0
    let pending: Pending = {}
    for (;;) {
      if (readSync(fd, block, 0, BLOCK, at) < BLOCK) break
      const header = parseHeader(block)
      if (header === null) break
      const plain = header
      const raw = header.flag
      at += BLOCK
      if (META.has(raw)) {
        if (plain.size > 1024 * 1024) throw new Error('a tar extended header larger than 1 MB')
        const data = Buffer.alloc(plain.size)
        readSync(fd, data, 0, plain.size, at)
        pending = describesNext(raw, data, pending) ?? pending
        at += padded(plain.size)
        continue
      }
      const member = applyPending(plain, pending)
      pending = {}
      found.set(member.name.replace(/^\.\//, ''), { ...member, offset: at })
      if (member.type === 'file' || member.type === 'other') at += padded(member.size)
    }
  } finally {
    closeSync(fd)
  }
  return found
}
