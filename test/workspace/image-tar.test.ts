import { execFileSync } from 'node:child_process'
import { mkdirSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { indexTarFile, readTar } from '../../src/workspace/environment/image-tar.js'
import type { TarMember } from '../../src/workspace/environment/image-tar.js'
import { scratch } from './image-fixture.js'

// The image's tar reader (docs/environments.md#an-image) on archives GNU tar writes: long names both ways (GNU and pax), links, modes, data across chunks.

const LONG = `${'deep/'.repeat(30)}file-with-a-name-past-one-hundred-bytes.txt`

function tree(dir: string): void {
  mkdirSync(join(dir, LONG, '..'), { recursive: true })
  writeFileSync(join(dir, LONG), 'long\n')
  writeFileSync(join(dir, 'big.bin'), Buffer.alloc(300_000, 7), { mode: 0o640 })
  execFileSync('ln', ['-s', '../elsewhere/target', join(dir, 'a-link')])
  execFileSync('ln', [join(dir, 'big.bin'), join(dir, 'hard.bin')])
}

/** Every member with its data's length and first byte, read from `chunks` of the archive. */
async function members(chunks: Buffer[]): Promise<(TarMember & { got: number; first: number | null })[]> {
  const out: (TarMember & { got: number; first: number | null })[] = []
  async function* source() {
    yield* chunks
  }
  for await (const { member, data } of readTar(source())) {
    let got = 0
    let first: number | null = null
    for await (const piece of data()) {
      if (first === null) first = piece[0] ?? null
      got += piece.length
    }
    out.push({ ...member, got, first })
  }
  return out
}

describe('the tar reader', () => {
  for (const format of ['gnu', 'pax']) {
    it(`reads GNU tar's ${format} archives: long names, links, modes, data split across chunks`, async () => {
      const dir = scratch('ctxagent-tar-')
      mkdirSync(join(dir, 'in'))
      tree(join(dir, 'in'))
      const archive = execFileSync('tar', ['-C', join(dir, 'in'), `--format=${format}`, '-cf', '-', '.'], { maxBuffer: 16 * 1024 * 1024 })
      // Odd chunk sizes: headers and data cross chunk boundaries.
      const chunks: Buffer[] = []
      for (let at = 0; at < archive.length; at += 777) chunks.push(archive.subarray(at, at + 777))
      const read = await members(chunks)
      const byName = new Map(read.map((m) => [m.name.replace(/^\.\//, ''), m]))
      expect(byName.get(LONG)).toMatchObject({ type: 'file', size: 5, got: 5 })
      expect(byName.get('a-link')).toMatchObject({ type: 'symlink', linkname: '../elsewhere/target' })
      const big = byName.get('big.bin')
      const hard = byName.get('hard.bin')
      const [file, link] = big?.type === 'file' ? [big, hard] : [hard, big]
      expect(file).toMatchObject({ type: 'file', size: 300_000, got: 300_000, first: 7, mode: 0o640 })
      expect(link).toMatchObject({ type: 'link', linkname: expect.stringMatching(/(big|hard)\.bin$/) })
      // The index of an uncompressed file finds the same members, each at its data's offset.
      writeFileSync(join(dir, 'a.tar'), archive)
      const index = indexTarFile(join(dir, 'a.tar'))
      const at = index.get(LONG)
      expect(at).toMatchObject({ type: 'file', size: 5 })
      expect(archive.subarray(at?.offset ?? 0, (at?.offset ?? 0) + 5).toString()).toBe('long\n')
    })
  }

  it('refuses a damaged header', async () => {
    const bad = Buffer.alloc(1024)
    bad.write('name', 0)
    bad.write('0000777\0', 148)
    await expect(members([bad])).rejects.toThrow(/wrong checksum/)
  })
})
