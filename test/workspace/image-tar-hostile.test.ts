import { existsSync, lstatSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { gzipSync } from 'node:zlib'
import { describe, expect, it } from 'vitest'
import { obtainImage } from '../../src/workspace/environment/image.js'
import type { ImageResult } from '../../src/workspace/environment/image.js'
import { readTar } from '../../src/workspace/environment/image-tar.js'
import { blockPadded, describing, END, ociLayout, pax, rawHeader, scratch, tarOf } from './image-fixture.js'

/*
 * A hostile author's tar archives (docs/environments.md#an-image, docs/security.md#an-image):
 * headers that would make the reader see another member than the one there (a size
 * that is negative, not a number, past 2^53), long names and pax records naming a way
 * out, and layers that fight over a name. Each refused, or unpacked inside the root only.
 */

async function names(archive: Buffer): Promise<string[]> {
  const out: string[] = []
  async function* source() {
    yield archive
  }
  for await (const { member, data } of readTar(source())) {
    for await (const _ of data());
    out.push(member.name)
  }
  return out
}

/** The layers as an OCI layout, unpacked into a store of `top`'s, by obtainImage as a task would. */
async function unpack(top: string, layers: Buffer[], gzip = false): Promise<ImageResult> {
  const layout = ociLayout(
    join(top, 'oci'),
    layers.map((tar) => ({ tar, gzip })),
  )
  return obtainImage({ path: layout, store: join(top, 'store'), identity: null, hidden: [] })
}

/** What the store holds besides locks and the repository directory: nothing when an image was refused. */
function kept(top: string): string[] {
  return readdirSync(join(top, 'store'), { recursive: true })
    .map(String)
    .filter((p) => !p.endsWith('.lock') && !/^[0-9a-f]{16}$/.test(p))
}

const smuggled = rawHeader({ name: 'smuggled', flag: '0', size: 2 })

describe('a hostile tar header', () => {
  it('a negative octal size is refused, not read as one byte of padding (after which a hidden member would follow)', async () => {
    const size = Buffer.from('-0000000001\0', 'latin1')
    const archive = Buffer.concat([rawHeader({ name: 'a', flag: '0', size }), Buffer.from('J'), smuggled, blockPadded('x\n'), END])
    await expect(names(archive)).rejects.toThrow(/bad size for "a"/)
  })

  it('a pax size that is not decimal digits is refused, not read as 0 (the data then read as headers)', async () => {
    for (const size of ['abc', '-1', '0x10', '1e3', ' 5']) {
      const archive = Buffer.concat([pax({ size }), rawHeader({ name: 'a', flag: '0', size: 0 }), smuggled, blockPadded('x\n'), END])
      await expect(names(archive), size).rejects.toThrow(/bad size/)
    }
    // What GNU tar writes is read: a pax size that says the truth.
    const right = Buffer.concat([pax({ size: '3' }), rawHeader({ name: 'a', flag: '0', size: 0 }), blockPadded('abc'), END])
    expect(await names(right)).toEqual(['a'])
  })

  it('base-256 sizes: a negative one and one past 2^53 are refused; a right one is read', async () => {
    const negative = Buffer.alloc(12, 0xff)
    const huge = Buffer.concat([Buffer.from([0x80]), Buffer.alloc(11, 0xff)])
    for (const size of [negative, huge]) await expect(names(Buffer.concat([rawHeader({ name: 'a', flag: '0', size }), END]))).rejects.toThrow(/bad size/)
    const three = Buffer.concat([Buffer.from([0x80]), Buffer.alloc(10), Buffer.from([3])])
    expect(await names(Buffer.concat([rawHeader({ name: 'a', flag: '0', size: three }), blockPadded('abc'), END]))).toEqual(['a'])
  })

  it('an extended header past 1 MB is refused before it is read', async () => {
    const archive = Buffer.concat([rawHeader({ name: 'x', flag: 'x', size: 2 * 1024 * 1024 }), END])
    await expect(names(archive)).rejects.toThrow(/larger than 1 MB/)
  })

  it('a truncated archive is refused inside a header and inside data', async () => {
    const whole = tarOf([{ name: 'a', data: 'x'.repeat(2000) }])
    await expect(names(whole.subarray(0, 700))).rejects.toThrow(/ends inside a/)
    await expect(names(whole.subarray(0, 300))).rejects.toThrow(/ends inside a header/)
  })
})

describe('a hostile layer', () => {
  const OUT: [string, Buffer, RegExp][] = [
    [
      'a pax path with a .. step',
      Buffer.concat([pax({ path: 'usr/../../escaped' }), rawHeader({ name: 'harmless', flag: '0', size: 0 }), END]),
      /leaves the root/,
    ],
    ['a pax path that is absolute', Buffer.concat([pax({ path: '/tmp/escaped' }), rawHeader({ name: 'harmless', flag: '0', size: 0 }), END]), /absolute/],
    ['a pax path with a NUL', Buffer.concat([pax({ path: 'usr/x\0/../../../escaped' }), rawHeader({ name: 'harmless', flag: '0', size: 0 }), END]), /absolute/],
    [
      'a GNU long name with a .. step',
      Buffer.concat([describing('L', `${'a/'.repeat(60)}../../${'../'.repeat(60)}escaped\0`), rawHeader({ name: 'harmless', flag: '0', size: 0 }), END]),
      /leaves the root/,
    ],
    [
      'a GNU long link naming a file outside for a hard link',
      Buffer.concat([describing('K', '../../../../etc/passwd\0'), rawHeader({ name: 'passwd', flag: '1' }), END]),
      /leaves the root/,
    ],
    [
      'a pax linkpath naming a file outside for a hard link',
      Buffer.concat([pax({ linkpath: '/etc/passwd' }), rawHeader({ name: 'passwd', flag: '1' }), END]),
      /absolute/,
    ],
    ['a whiteout named ../.wh.x', tarOf([{ name: '../.wh.x' }]), /leaves the root/],
  ]
  for (const [what, layer, refusal] of OUT) {
    it(`refuses ${what}, keeping nothing`, async () => {
      const top = scratch('ctxagent-tarhostile-')
      const got = await unpack(top, [tarOf([{ name: 'bin', type: 'dir' }]), layer])
      expect(got).toMatchObject({ ok: false, error: expect.stringMatching(refusal) })
      expect(existsSync(join(top, 'escaped'))).toBe(false)
      expect(kept(top)).toEqual([])
    })
  }

  it("normalises '//', './' and a trailing '/' into steps inside the root", async () => {
    const top = scratch('ctxagent-tarhostile-')
    const got = await unpack(top, [
      tarOf([
        { name: './usr//bin/./tool/', data: 'tool\n' },
        { name: './', type: 'dir', mode: 0o777 },
      ]),
    ])
    if (!got.ok) throw new Error(got.error)
    expect(readFileSync(join(got.root, 'usr', 'bin', 'tool'), 'utf8')).toBe('tool\n')
  })

  it("a link to a host directory whited out, replaced by a directory, or under an opaque directory: the host's directory is untouched", async () => {
    const top = scratch('ctxagent-tarhostile-')
    const outside = join(top, 'OUTSIDE')
    mkdirSync(join(outside, 'inner'), { recursive: true })
    writeFileSync(join(outside, 'inner', 'keep'), 'host file\n')
    const first = tarOf([
      { name: 'bin', type: 'dir' },
      { name: 'gone', type: 'symlink', linkname: outside },
      { name: 'replaced', type: 'symlink', linkname: outside },
      { name: 'opaque', type: 'dir' },
      { name: 'opaque/link', type: 'symlink', linkname: outside },
      { name: 'file-over', type: 'symlink', linkname: join(outside, 'inner', 'keep') },
    ])
    const second = tarOf([
      { name: '.wh.gone' },
      { name: 'replaced', type: 'dir' },
      { name: 'replaced/new', data: 'in the image\n' },
      { name: 'opaque/.wh..wh..opq' },
      { name: 'file-over', data: 'in the image\n' },
    ])
    const got = await unpack(top, [first, second])
    if (!got.ok) throw new Error(got.error)
    expect(readdirSync(outside)).toEqual(['inner'])
    expect(readdirSync(join(outside, 'inner'))).toEqual(['keep'])
    expect(readFileSync(join(outside, 'inner', 'keep'), 'utf8')).toBe('host file\n')
    expect(lstatSync(join(got.root, 'replaced')).isDirectory()).toBe(true)
    expect(readFileSync(join(got.root, 'file-over'), 'utf8')).toBe('in the image\n')
    expect(existsSync(join(got.root, 'gone'))).toBe(false)
    expect(readdirSync(join(got.root, 'opaque'))).toEqual([])
  })

  it('a directory replaced by a link to a host directory, then a layer writing through it: refused, nothing written there', async () => {
    const top = scratch('ctxagent-tarhostile-')
    const outside = join(top, 'OUTSIDE')
    mkdirSync(outside)
    const got = await unpack(top, [
      tarOf([
        { name: 'bin', type: 'dir' },
        { name: 'etc', type: 'dir' },
      ]),
      tarOf([{ name: '.wh.etc' }, { name: 'etc', type: 'symlink', linkname: outside }]),
      tarOf([{ name: 'etc/passwd', data: 'root::0:0::/:/bin/sh\n' }]),
    ])
    expect(got).toMatchObject({ ok: false, error: expect.stringMatching(/layer 3 .*way passes a link/) })
    expect(readdirSync(outside)).toEqual([])
    expect(kept(top)).toEqual([])
  })

  it('a hard link to a link is refused; a hard link to a file a later layer whites out keeps its content, inside the root', async () => {
    const top = scratch('ctxagent-tarhostile-')
    const toLink = await unpack(top, [
      tarOf([
        { name: 'bin', type: 'dir' },
        { name: 'shadow', type: 'symlink', linkname: '/etc/shadow' },
        { name: 'hard', type: 'link', linkname: 'shadow' },
      ]),
    ])
    expect(toLink).toMatchObject({ ok: false, error: expect.stringMatching(/hard link to something other than a file/) })
    const top2 = scratch('ctxagent-tarhostile-')
    const got = await unpack(top2, [
      tarOf([
        { name: 'bin', type: 'dir' },
        { name: 'a', data: 'content\n' },
        { name: 'b', type: 'link', linkname: 'a' },
      ]),
      tarOf([{ name: '.wh.a' }]),
    ])
    if (!got.ok) throw new Error(got.error)
    expect(existsSync(join(got.root, 'a'))).toBe(false)
    expect(readFileSync(join(got.root, 'b'), 'utf8')).toBe('content\n')
  })

  it("an opaque whiteout at the root hides the layers below, not the root's own place", async () => {
    const top = scratch('ctxagent-tarhostile-')
    const got = await unpack(top, [
      tarOf([
        { name: 'old', data: 'x' },
        { name: 'bin', type: 'dir' },
      ]),
      tarOf([{ name: '.wh..wh..opq' }, { name: 'new', data: 'y' }]),
    ])
    if (!got.ok) throw new Error(got.error)
    expect(readdirSync(got.root)).toEqual(['new'])
    expect(existsSync(join(got.root, '..', 'entry.json'))).toBe(true)
  })

  it('a gzip layer that ends early (its digest made for the cut bytes) is refused, nothing kept', async () => {
    const top = scratch('ctxagent-tarhostile-')
    const whole = gzipSync(
      tarOf([
        { name: 'bin', type: 'dir' },
        { name: 'big', data: 'y'.repeat(200_000) },
      ]),
    )
    const layout = ociLayout(join(top, 'oci'), [{ tar: Buffer.alloc(0), gzip: false }])
    // The layout's one layer swapped for the cut gzip, under its own digest.
    const { createHash } = await import('node:crypto')
    const cut = whole.subarray(0, Math.floor(whole.length / 2))
    const hex = createHash('sha256').update(cut).digest('hex')
    writeFileSync(join(layout, 'blobs', 'sha256', hex), cut)
    const blobs = join(layout, 'blobs', 'sha256')
    const index = JSON.parse(readFileSync(join(layout, 'index.json'), 'utf8'))
    const manifest = JSON.parse(readFileSync(join(blobs, index.manifests[0].digest.slice(7)), 'utf8'))
    manifest.layers[0] = { mediaType: 'application/vnd.oci.image.layer.v1.tar+gzip', digest: `sha256:${hex}`, size: cut.length }
    const text = JSON.stringify(manifest)
    const mhex = createHash('sha256').update(text).digest('hex')
    writeFileSync(join(blobs, mhex), text)
    index.manifests[0].digest = `sha256:${mhex}`
    writeFileSync(join(layout, 'index.json'), JSON.stringify(index))
    const got = await obtainImage({ path: layout, store: join(top, 'store'), identity: null, hidden: [] })
    expect(got).toMatchObject({ ok: false, error: expect.stringMatching(/could not be unpacked: layer 1 .*(unexpected end|ends inside)/) })
    expect(kept(top)).toEqual([])
  })
})
