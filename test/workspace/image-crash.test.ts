import { execFileSync } from 'node:child_process'
import { existsSync, mkdirSync, readdirSync, statSync, utimesSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { describe, expect, it } from 'vitest'
import { obtainImage } from '../../src/workspace/environment/image.js'
import { helper } from '../helpers/run.js'
import { exitOf } from '../helpers/wait.js'
import { ociLayout, scratch } from './image-fixture.js'

/*
 * An unpacker killed in the middle of a layer (a real child, SIGKILL): the entry is
 * complete only once it is renamed into place with its entry.json, so the next task never
 * uses the half-unpacked root; it takes the dead holder's lock over, removes what was
 * left and unpacks the image whole (docs/environments.md#an-image).
 */

const BIG = 192 * 1024 * 1024

describe('an unpacker killed mid-layer', () => {
  it('leaves nothing the next task uses: it unpacks the image again, whole, and removes the half', { timeout: 300_000 }, async () => {
    const top = scratch('ctxagent-imgcrash-')
    const src = join(top, 'src')
    mkdirSync(join(src, 'bin'), { recursive: true })
    writeFileSync(join(src, 'a-first'), 'first\n')
    execFileSync('sh', ['-c', `head -c ${BIG} /dev/zero > '${src}/m-big' && echo last > '${src}/z-last'`])
    const layer = execFileSync('sh', ['-c', `tar -C '${src}' --sort=name -cf - . | gzip -1`], { maxBuffer: 64 * 1024 * 1024 })
    const oci = ociLayout(join(top, 'oci'), [{ tar: Buffer.alloc(0), gzip: false }])
    // The layout's layer: the gzip stream itself (its diff_id is not checked for OCI, its blob digest is).
    const { createHash } = await import('node:crypto')
    const sha = (b: Buffer | string) => createHash('sha256').update(b).digest('hex')
    const blobs = join(oci, 'blobs', 'sha256')
    writeFileSync(join(blobs, sha(layer)), layer)
    const manifest = JSON.stringify({
      schemaVersion: 2,
      layers: [{ mediaType: 'application/vnd.oci.image.layer.v1.tar+gzip', digest: `sha256:${sha(layer)}`, size: layer.length }],
    })
    writeFileSync(join(blobs, sha(manifest)), manifest)
    writeFileSync(
      join(oci, 'index.json'),
      JSON.stringify({ manifests: [{ mediaType: 'application/vnd.oci.image.manifest.v1+json', digest: `sha256:${sha(manifest)}` }] }),
    )
    const store = join(top, 'store')

    const child = helper('image-unpack.mjs', [oci, store])
    const exited = exitOf(child)
    // Killed once the big member is being written: the first file is in, the last is not.
    let half: string | null = null
    while (half === null) {
      const repo = existsSync(store) ? readdirSync(store).find((n) => /^[0-9a-f]{16}$/.test(n)) : undefined
      const unpack = repo === undefined ? undefined : readdirSync(join(store, repo)).find((n) => n.includes('.unpack-'))
      const big = repo === undefined || unpack === undefined ? null : join(store, repo, unpack, 'm-big')
      if (big !== null && existsSync(big) && statSync(big).size > 0) {
        child.kill('SIGKILL')
        half = join(store, repo as string, unpack as string)
      } else await sleep(5)
    }
    await exited
    expect(existsSync(join(half, 'a-first'))).toBe(true)
    expect(existsSync(join(half, 'z-last'))).toBe(false)
    const entry = half.replace(/\.unpack-.*$/, '')
    expect(existsSync(join(entry, 'entry.json'))).toBe(false)

    // The dead holder's lock, as it is 30 s later (its holder no longer refreshes it).
    const past = new Date(Date.now() - 120_000)
    utimesSync(`${entry}.lock`, past, past)
    const got = await obtainImage({ path: oci, store, identity: null, hidden: [] })
    if (!got.ok) throw new Error(got.error)
    expect(got.record.cache).toBe('miss')
    expect(got.root).toBe(join(entry, 'paths'))
    expect(statSync(join(got.root, 'm-big')).size).toBe(BIG)
    expect(existsSync(join(got.root, 'z-last'))).toBe(true)
    // The half is gone.
    expect(readdirSync(join(entry, '..')).filter((n) => n.includes('.unpack-') || n.includes('.partial-'))).toEqual([])
  })
})
