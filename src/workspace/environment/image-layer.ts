import { closeSync, fchmodSync, linkSync, lstatSync, mkdirSync, openSync, readdirSync, rmSync, symlinkSync, chmodSync, writeSync } from 'node:fs'
import { join, relative } from 'node:path'
import { readTar } from './image-tar.js'
import type { TarMember } from './image-tar.js'

/*
 * One layer of an image applied to a root being built (docs/environments.md#an-image),
 * as OCI's image spec describes it (whiteouts `.wh.NAME`, opaque directories
 * `.wh..wh..opq`), and safely: nothing is ever written outside the root. A member whose
 * name is absolute or has a `..` step, or whose way passes a link (one an earlier member
 * or layer made), or a hard link to anything but a file of the root, refuses the whole
 * image. Devices and FIFOs are not made; setuid and setgid bits are dropped; owners are
 * ctxagent's user's (what a sandboxed command may read is what the modes say).
 */

export class RefusedImage extends Error {}

export interface LayerCounts {
  members: number
  /** Devices, FIFOs and members of an unknown type: not made. */
  skipped: number
}

/** The steps of a member's name inside the root; refuses an absolute name or a `..` step. */
export function memberSteps(name: string, what = 'member'): string[] {
  if (name.includes('\0') || name.startsWith('/')) throw new RefusedImage(`a ${what} with an absolute name (${JSON.stringify(name)})`)
  const steps = name.split('/').filter((s) => s !== '' && s !== '.')
  if (steps.includes('..')) throw new RefusedImage(`a ${what} whose name leaves the root (${JSON.stringify(name)})`)
  return steps
}

function kind(path: string): 'dir' | 'link' | 'other' | null {
  try {
    const st = lstatSync(path)
    return st.isDirectory() ? 'dir' : st.isSymbolicLink() ? 'link' : 'other'
  } catch {
    return null
  }
}

/** The directory holding `steps`' last one, made where missing; refuses a way through a link or a file. */
function parentOf(root: string, steps: readonly string[], name: string): string {
  let at = root
  for (const step of steps.slice(0, -1)) {
    at = join(at, step)
    const k = kind(at)
    if (k === null) mkdirSync(at, { mode: 0o755 })
    else if (k === 'link') throw new RefusedImage(`a member whose way passes a link (${JSON.stringify(name)})`)
    else if (k === 'other') throw new RefusedImage(`a member inside a file (${JSON.stringify(name)})`)
  }
  return at
}

/**
 * Permission bits only, and never writable by group or others: no setuid, setgid or
 * sticky bit (the sandbox shows the root read-only, so they would mean nothing there, but
 * on the host a 0777 directory of the cache would let any local user change an entry
 * that every later task runs). A directory is always its owner's to enter and change
 * (ctxagent's user's): a 0000 or 0555 one the image gives could not be removed by
 * `cleanup` otherwise when ctxagent does not run as root.
 */
const modeOf = (m: TarMember): number => (m.type === 'dir' ? (m.mode & 0o755) | 0o700 : m.mode & 0o755)

/** What is left of an image's allowance across its layers (docs/environments.md#an-image): members. */
export interface Budget {
  members: number
  /** The limit it started from, for the message. */
  maxMembers: number
}

/** At most this many members (headers) in all an image's layers. */
export const MAX_IMAGE_MEMBERS = 1_000_000

/**
 * Applies the layer read from `source` to `root`. Directories stay writable while the
 * layers are applied (a read-only one may get members from a later layer): their modes
 * go to `dirModes`, for setDirModes once the last layer is in.
 */
export async function applyLayer(root: string, source: AsyncIterable<Buffer>, dirModes: Map<string, number>, budget: Budget): Promise<LayerCounts> {
  const counts: LayerCounts = { members: 0, skipped: 0 }
  // What this layer made: its whiteouts hide only the layers below it.
  const made = new Set<string>()
  for await (const { member, data } of readTar(source)) {
    counts.members++
    if (--budget.members < 0) throw new RefusedImage(`its layers hold more than ${budget.maxMembers} members (ctxagent's limit)`)
    const steps = memberSteps(member.name)
    if (steps.length === 0) continue
    const base = steps[steps.length - 1] as string
    const parent = parentOf(root, steps, member.name)
    const path = join(parent, base)
    const key = steps.join('/')
    if (base === '.wh..wh..opq') {
      for (const name of readdirSync(parent))
        if (!made.has(`${steps.slice(0, -1).concat(name).join('/')}`)) rmSync(join(parent, name), { recursive: true, force: true })
      continue
    }
    if (base.startsWith('.wh.')) {
      const hidden = base.slice(4)
      if (hidden === '' || hidden === '..' || hidden === '.') throw new RefusedImage(`a whiteout with no name (${JSON.stringify(member.name)})`)
      if (!made.has(steps.slice(0, -1).concat(hidden).join('/'))) rmSync(join(parent, hidden), { recursive: true, force: true })
      continue
    }
    made.add(key)
    if (member.type === 'dir') {
      if (kind(path) !== 'dir') {
        rmSync(path, { recursive: true, force: true })
        mkdirSync(path, { mode: 0o755 })
      }
      dirModes.set(path, modeOf(member))
      continue
    }
    if (member.type === 'other') {
      counts.skipped++
      continue
    }
    rmSync(path, { recursive: true, force: true })
    if (member.type === 'symlink') symlinkSync(member.linkname, path)
    else if (member.type === 'link') linkSync(linkTarget(root, member), path)
    else await writeFile(path, modeOf(member), data())
  }
  return counts
}

/**
 * The directories' modes, deepest first (a read-only parent does not stop its children's).
 * One a later layer removed is gone; one whose way a later layer made a link (a directory
 * replaced by a link elsewhere) is not followed there: every step is looked at unfollowed.
 */
export function setDirModes(root: string, dirModes: Map<string, number>): void {
  for (const [path, mode] of [...dirModes].sort((a, b) => b[0].length - a[0].length)) {
    const steps = relative(root, path).split('/')
    let at = root
    if (steps.every((step) => kind((at = join(at, step))) === 'dir')) chmodSync(path, mode)
  }
}

/** A hard link's target: a file already in the root, reached without passing a link. */
function linkTarget(root: string, member: TarMember): string {
  const steps = memberSteps(member.linkname, 'hard link')
  let at = root
  for (const [i, step] of steps.entries()) {
    at = join(at, step)
    const k = kind(at)
    if (k === null) throw new RefusedImage(`a hard link to a member that is not there (${JSON.stringify(member.linkname)})`)
    if (k === 'link' || (i < steps.length - 1 && k !== 'dir') || (i === steps.length - 1 && k !== 'other'))
      throw new RefusedImage(`a hard link to something other than a file of the image (${JSON.stringify(member.linkname)})`)
  }
  if (steps.length === 0) throw new RefusedImage(`a hard link to the root (${JSON.stringify(member.name)})`)
  return at
}

/** A new file (never one that is there: O_EXCL does not follow a link) with the member's data. */
async function writeFile(path: string, mode: number, data: AsyncGenerator<Buffer>): Promise<void> {
  const fd = openSync(path, 'wx', 0o600)
  try {
    for await (const piece of data) {
      let at = 0
      while (at < piece.length) at += writeSync(fd, piece, at, piece.length - at)
    }
    fchmodSync(fd, mode)
  } finally {
    closeSync(fd)
  }
}
