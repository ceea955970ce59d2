import { execFileSync } from 'node:child_process'
import { createHash } from 'node:crypto'
import { chmodSync, copyFileSync, readFileSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { gzipSync } from 'node:zlib'
import { onTestFinished } from 'vitest'

/*
 * Tiny images the tests build themselves (docs/environments.md#an-image), from Debian's
 * busybox-static: a root file system directory, its layers as tar archives, an OCI image
 * layout and a `docker save` archive of them, and hand-made hostile layers.
 */

export const BUSYBOX = '/bin/busybox'

/** A directory of the test's own, searchable by the sandbox's user (a 0700 temp directory is not). */
export function scratch(prefix: string): string {
  const dir = mkdtempSync(join(tmpdir(), prefix))
  chmodSync(dir, 0o755)
  onTestFinished(() => rmSync(dir, { recursive: true, force: true }))
  return dir
}

/**
 * A root file system in `dir`: busybox with a link per applet in /bin (relative, so that
 * they resolve inside the sandbox), /usr/bin/image-tool (a script only the image has),
 * /etc/passwd and /etc/os-release.
 */
export function busyboxRoot(dir: string): string {
  mkdirSync(join(dir, 'bin'), { recursive: true })
  copyFileSync(BUSYBOX, join(dir, 'bin', 'busybox'))
  chmodSync(join(dir, 'bin', 'busybox'), 0o755)
  const applets = execFileSync(BUSYBOX, ['--list'], { encoding: 'utf8' })
    .split('\n')
    .filter((a) => a !== '' && a !== 'busybox')
  for (const applet of applets) symlinkSync('busybox', join(dir, 'bin', applet))
  mkdirSync(join(dir, 'usr', 'bin'), { recursive: true })
  writeFileSync(join(dir, 'usr', 'bin', 'image-tool'), '#!/bin/sh\necho "image-tool from the image"\n', { mode: 0o755 })
  mkdirSync(join(dir, 'etc'), { recursive: true })
  writeFileSync(join(dir, 'etc', 'passwd'), 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/sh\n')
  writeFileSync(join(dir, 'etc', 'os-release'), 'NAME="busybox test image"\n')
  mkdirSync(join(dir, 'tmp'), { mode: 0o1777 })
  return dir
}

/** The tar archive of a directory's content (system tar, as image builders make them). */
export function tarOfDir(dir: string): Buffer {
  return execFileSync('tar', ['-C', dir, '--owner=0', '--group=0', '--numeric-owner', '-cf', '-', '.'], { maxBuffer: 64 * 1024 * 1024 })
}

export interface Member {
  name: string
  type?: 'file' | 'dir' | 'symlink' | 'link' | 'char'
  mode?: number
  data?: string
  linkname?: string
}

/** A tar archive written member by member, names as given (`../x`, `/abs`): what a hostile layer is. */
export function tarOf(members: readonly Member[]): Buffer {
  const blocks: Buffer[] = []
  for (const m of members) {
    const header = Buffer.alloc(512)
    const data = Buffer.from(m.data ?? '')
    const type = m.type ?? 'file'
    header.write(m.name, 0, 100, 'utf8')
    header.write(`${(m.mode ?? (type === 'dir' ? 0o755 : 0o644)).toString(8).padStart(7, '0')}\0`, 100, 'latin1')
    header.write('0000000\0', 108, 'latin1')
    header.write('0000000\0', 116, 'latin1')
    header.write(`${(type === 'file' ? data.length : 0).toString(8).padStart(11, '0')}\0`, 124, 'latin1')
    header.write('00000000000\0', 136, 'latin1')
    header.write({ file: '0', link: '1', symlink: '2', char: '3', dir: '5' }[type], 156, 'latin1')
    header.write(m.linkname ?? '', 157, 100, 'utf8')
    header.write('ustar\x0000', 257, 'latin1')
    if (type === 'char') header.write('0000001\0', 329, 'latin1')
    header.fill(0x20, 148, 156)
    let sum = 0
    for (const b of header) sum += b
    header.write(`${sum.toString(8).padStart(6, '0')}\0 `, 148, 'latin1')
    blocks.push(header)
    if (type === 'file') blocks.push(data, Buffer.alloc((512 - (data.length % 512)) % 512))
  }
  blocks.push(Buffer.alloc(1024))
  return Buffer.concat(blocks)
}

const sha = (b: Buffer | string): string => createHash('sha256').update(b).digest('hex')

/** An OCI image layout in `dir` of `layers` (tar archives; gzipped where `gzip` says). */
export function ociLayout(dir: string, layers: readonly { tar: Buffer; gzip: boolean }[]): string {
  const blobs = join(dir, 'blobs', 'sha256')
  mkdirSync(blobs, { recursive: true })
  const put = (bytes: Buffer | string): { digest: string; size: number } => {
    const b = Buffer.from(bytes)
    const hex = sha(b)
    writeFileSync(join(blobs, hex), b)
    return { digest: `sha256:${hex}`, size: b.length }
  }
  const layerDescriptors = layers.map((l) => ({
    mediaType: `application/vnd.oci.image.layer.v1.tar${l.gzip ? '+gzip' : ''}`,
    ...put(l.gzip ? gzipSync(l.tar) : l.tar),
  }))
  const config = put(JSON.stringify({ architecture: 'amd64', os: 'linux', rootfs: { type: 'layers', diff_ids: layers.map((l) => `sha256:${sha(l.tar)}`) } }))
  const manifest = put(
    JSON.stringify({
      schemaVersion: 2,
      mediaType: 'application/vnd.oci.image.manifest.v1+json',
      config: { mediaType: 'application/vnd.oci.image.config.v1+json', ...config },
      layers: layerDescriptors,
    }),
  )
  writeFileSync(join(dir, 'oci-layout'), '{"imageLayoutVersion":"1.0.0"}')
  writeFileSync(
    join(dir, 'index.json'),
    JSON.stringify({ schemaVersion: 2, manifests: [{ mediaType: 'application/vnd.oci.image.manifest.v1+json', ...manifest }] }),
  )
  return dir
}

/** A `docker save` archive at `file` of `layers` (uncompressed, as docker writes it; a repeated layer as a link, as docker does). */
export function dockerSave(file: string, layers: readonly Buffer[], work: string): string {
  const root = join(work, 'docker-save')
  mkdirSync(root, { recursive: true })
  const names: string[] = []
  for (const [i, tar] of layers.entries()) {
    const id = sha(`${i}:${sha(tar)}`)
    mkdirSync(join(root, id))
    writeFileSync(join(root, id, 'layer.tar'), tar)
    names.push(`${id}/layer.tar`)
  }
  const config = JSON.stringify({ architecture: 'amd64', os: 'linux', rootfs: { type: 'layers', diff_ids: layers.map((l) => `sha256:${sha(l)}`) } })
  writeFileSync(join(root, `${sha(config)}.json`), config)
  writeFileSync(join(root, 'manifest.json'), JSON.stringify([{ Config: `${sha(config)}.json`, RepoTags: ['busybox-test:1'], Layers: names }]))
  execFileSync('tar', ['-C', root, '-cf', file, '.'])
  return file
}

/** `file` gzipped beside it (`docker save … | gzip`, what many operators keep): the new file's path. */
export function gzipped(file: string): string {
  writeFileSync(`${file}.gz`, gzipSync(readFileSync(file)))
  return `${file}.gz`
}

/** One tar header block as a hostile writer makes it: any type flag, any size field (the bytes as given), a checksum that is right. */
export function rawHeader(h: { name: string; flag: string; size?: number | Buffer; linkname?: string; mode?: number }): Buffer {
  const header = Buffer.alloc(512)
  header.write(h.name, 0, 100, 'utf8')
  header.write(`${(h.mode ?? 0o644).toString(8).padStart(7, '0')}\0`, 100, 'latin1')
  header.write('0000000\0', 108, 'latin1')
  header.write('0000000\0', 116, 'latin1')
  if (Buffer.isBuffer(h.size)) h.size.copy(header, 124, 0, 12)
  else header.write(`${(h.size ?? 0).toString(8).padStart(11, '0')}\0`, 124, 'latin1')
  header.write('00000000000\0', 136, 'latin1')
  header.write(h.flag, 156, 'latin1')
  header.write(h.linkname ?? '', 157, 100, 'utf8')
  header.write('ustar\x0000', 257, 'latin1')
  header.fill(0x20, 148, 156)
  let sum = 0
  for (const b of header) sum += b
  header.write(`${sum.toString(8).padStart(6, '0')}\0 `, 148, 'latin1')
  return header
}

/** `data` and the zeros that pad it to a block. */
export const blockPadded = (data: Buffer | string): Buffer => {
  const b = Buffer.from(data)
  return Buffer.concat([b, Buffer.alloc((512 - (b.length % 512)) % 512)])
}

/** A header that describes the next member (GNU long name `L`, long link `K`, pax `x`) with its data. */
export function describing(flag: 'L' | 'K' | 'x', data: string | Buffer): Buffer {
  const b = Buffer.from(data)
  return Buffer.concat([rawHeader({ name: '././@LongLink', flag, size: b.length }), blockPadded(b)])
}

/** A pax extended header of `records` (key=value), each as "LEN key=value\n". */
export function pax(records: Record<string, string>): Buffer {
  const lines = Object.entries(records).map(([k, v]) => {
    const body = ` ${k}=${v}\n`
    let len = body.length + 1
    while (`${len}${body}`.length !== len) len++
    return `${len}${body}`
  })
  return describing('x', lines.join(''))
}

/** The zero blocks that end an archive. */
export const END = Buffer.alloc(1024)
