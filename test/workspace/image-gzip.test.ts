import { chmodSync, existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { gzipSync } from 'node:zlib'
import { describe, expect, it } from 'vitest'
import { planSandbox } from '../../src/tools/sandbox.js'
import { obtainImage } from '../../src/workspace/environment/image.js'
import { runScript } from '../../src/workspace/environment/sandboxed.js'
import { giveToSandbox } from '../helpers/sandbox-owner.js'
import { busyboxRoot, dockerSave, END, gzipped, rawHeader, scratch, tarOf, tarOfDir } from './image-fixture.js'

/*
 * A gzipped `docker save` archive (docs/environments.md#an-image): unpacked through
 * node:zlib as the plain archive is, under the same digest (one cache entry for both),
 * and run in by the real sandbox; a gzip bomb and an archive of too many members stop at
 * the bounds, counted on the gunzipped bytes, keeping nothing (docs/security.md#an-image).
 */

/** What the store holds besides locks: nothing when the image was refused (no store at all when refused before unpacking). */
function kept(store: string): string[] {
  if (!existsSync(store)) return []
  return readdirSync(store, { recursive: true })
    .map(String)
    .filter((p) => !p.endsWith('.lock') && !/^[0-9a-f]{16}$/.test(p))
}

function sandboxed(root: string, script: string) {
  const ws = join(scratch('ctxagent-gzws-'), 'ws')
  mkdirSync(ws)
  giveToSandbox(ws, null)
  const planned = planSandbox({ sandbox: 'bwrap', network: false, sandbox_read_only: [] }, [], ws)
  if (!planned.ok || planned.plan.kind !== 'bwrap') throw new Error(planned.ok ? 'no bwrap plan' : planned.why)
  return runScript({ plan: { ...planned.plan, root }, workspace: ws, script, hosts: null, timeoutMs: 60_000, log: null })
}

/** A docker save archive (plain) whose first member is `junk`, before docker's own. */
function withJunkFirst(top: string, junk: Buffer): string {
  const plain = dockerSave(join(top, 'image.tar'), [tarOf([{ name: 'bin', type: 'dir' }])], top)
  // The archive ends with two zero blocks; junk goes first, then docker's members as they were.
  const archive = readFileSync(plain)
  writeFileSync(join(top, 'junk.tar'), Buffer.concat([rawHeader({ name: 'junk', flag: '0', size: junk.length }), junk, archive]))
  return join(top, 'junk.tar')
}

describe('a gzipped docker save archive', () => {
  it('unpacks as the plain archive does, under the same digest (one cache entry), and runs in the sandbox', { timeout: 60_000 }, async () => {
    const top = scratch('ctxagent-imggz-')
    const first = tarOfDir(busyboxRoot(join(top, 'layer1')))
    const second = tarOf([{ name: 'usr/bin/layer2-tool', data: '#!/bin/sh\necho layer2\n', mode: 0o755 }])
    const plain = dockerSave(join(top, 'image.tar'), [first, second], top)
    const gz = gzipped(plain)
    expect(readFileSync(gz).subarray(0, 2)).toEqual(Buffer.from([0x1f, 0x8b]))
    const store = join(top, 'store')
    const a = await obtainImage({ path: gz, store, identity: null, hidden: [] })
    if (!a.ok) throw new Error(a.error)
    expect(a.record).toMatchObject({ kind: 'docker-save', cache: 'miss', digest: expect.stringMatching(/^sha256:[0-9a-f]{64}$/) })
    const r = await sandboxed(a.root, 'image-tool && layer2-tool && [ ! -e /usr/bin/git ] && echo GZ-PASSED')
    expect(r.tail).toContain('image-tool from the image')
    expect(r.tail).toContain('GZ-PASSED')
    expect(r.code).toBe(0)
    // The plain archive is the same image: its entry is the one the gzipped one made.
    const b = await obtainImage({ path: plain, store, identity: null, hidden: [] })
    expect(b).toMatchObject({ ok: true, root: a.root, record: { cache: 'hit', digest: a.record.digest } })
  })

  it('a layer changed after its config was written is refused, read through gunzip as without it', async () => {
    const top = scratch('ctxagent-imggz-')
    const layer = tarOf([{ name: 'bin', type: 'dir' }])
    const plain = dockerSave(join(top, 'image.tar'), [layer], top)
    // The layer's bytes swapped in the archive for others of the same length.
    const archive = readFileSync(plain)
    const at = archive.indexOf(layer)
    expect(at).toBeGreaterThan(0)
    const swapped = tarOf([{ name: 'evil', type: 'dir' }])
    expect(swapped.length).toBe(layer.length)
    swapped.copy(archive, at)
    writeFileSync(join(top, 'bad.tar.gz'), gzipSync(archive))
    const got = await obtainImage({ path: join(top, 'bad.tar.gz'), store: join(top, 'store'), identity: null, hidden: [] })
    expect(got).toMatchObject({ ok: false, error: expect.stringContaining('does not match its digest') })
    expect(kept(join(top, 'store'))).toEqual([])
  })
})

describe('a gzipped archive read once', () => {
  it('a later task learns the digest from what the first read kept, until the archive changes', async () => {
    const top = scratch('ctxagent-imggz-')
    const gz = gzipped(dockerSave(join(top, 'image.tar'), [tarOf([{ name: 'bin', type: 'dir' }])], top))
    const store = join(top, 'store')
    // Limits no read through the archive could keep to: only what the first read kept passes them.
    const tiny = { bytes: 1, members: 1 }
    const before = await obtainImage({ path: gz, store, identity: null, hidden: [], limits: tiny })
    expect(before).toMatchObject({ ok: false, error: expect.stringMatching(/more than 1 bytes|more than 1 members/) })
    const first = await obtainImage({ path: gz, store, identity: null, hidden: [] })
    if (!first.ok) throw new Error(first.error)
    const again = await obtainImage({ path: gz, store, identity: null, hidden: [], limits: tiny })
    expect(again).toMatchObject({ ok: true, root: first.root, record: { cache: 'hit', digest: first.record.digest } })
    // Any change to the file (here a chmod, which moves its change time) and it is read again.
    chmodSync(gz, 0o600)
    const changed = await obtainImage({ path: gz, store, identity: null, hidden: [], limits: tiny })
    expect(changed).toMatchObject({ ok: false, error: expect.stringMatching(/more than 1 bytes|more than 1 members/) })
  })

  it('an image refused after its read (a layer not matching its digest) keeps no memo of it', async () => {
    const top = scratch('ctxagent-imggz-')
    const layer = tarOf([{ name: 'bin', type: 'dir' }])
    const archive = readFileSync(dockerSave(join(top, 'image.tar'), [layer], top))
    tarOf([{ name: 'evil', type: 'dir' }]).copy(archive, archive.indexOf(layer))
    writeFileSync(join(top, 'bad.tar.gz'), gzipSync(archive))
    const store = join(top, 'store')
    for (let i = 0; i < 2; i++) {
      const got = await obtainImage({ path: join(top, 'bad.tar.gz'), store, identity: null, hidden: [] })
      expect(got).toMatchObject({ ok: false, error: expect.stringContaining('does not match its digest') })
      expect(kept(store)).toEqual([])
    }
  })
})

describe('a hostile gzipped archive', () => {
  it('a gzip bomb (64 MB of zeros before the manifest) stops at the limit on gunzipped bytes, keeping nothing', async () => {
    const top = scratch('ctxagent-imggz-')
    const bomb = gzipSync(readFileSync(withJunkFirst(top, Buffer.alloc(64 * 1024 * 1024))))
    expect(bomb.length).toBeLessThan(1024 * 1024)
    writeFileSync(join(top, 'bomb.tar.gz'), bomb)
    const store = join(top, 'store')
    const got = await obtainImage({ path: join(top, 'bomb.tar.gz'), store, identity: null, hidden: [], limits: { bytes: 16 * 1024 * 1024, members: 1000 } })
    expect(got).toMatchObject({ ok: false, error: expect.stringMatching(/refused: the archive unpacks to more than 16777216 bytes \(ctxagent's limit\)/) })
    expect(kept(store)).toEqual([])
    // Under the default limit the same archive is an image (the bound is what stopped it).
    const ok = await obtainImage({ path: join(top, 'bomb.tar.gz'), store, identity: null, hidden: [] })
    expect(ok).toMatchObject({ ok: true, record: { kind: 'docker-save', cache: 'miss' } })
  })

  it('an archive of more members than the limit is refused while it is read, keeping nothing', async () => {
    const top = scratch('ctxagent-imggz-')
    const many = Buffer.concat([...Array.from({ length: 2000 }, (_, i) => rawHeader({ name: `d${i}/`, flag: '5' })), END])
    const archive = withJunkFirst(top, Buffer.alloc(0))
    writeFileSync(join(top, 'many.tar.gz'), gzipSync(Buffer.concat([many.subarray(0, many.length - END.length), readFileSync(archive)])))
    const store = join(top, 'store')
    const got = await obtainImage({ path: join(top, 'many.tar.gz'), store, identity: null, hidden: [], limits: { bytes: 1024 ** 3, members: 1000 } })
    expect(got).toMatchObject({ ok: false, error: expect.stringMatching(/more than 1000 members/) })
    expect(kept(store)).toEqual([])
  })

  it('gzip that is damaged is refused with a line saying so', async () => {
    const top = scratch('ctxagent-imggz-')
    const whole = gzipSync(readFileSync(withJunkFirst(top, Buffer.from('x'.repeat(10)))))
    writeFileSync(join(top, 'cut.tar.gz'), whole.subarray(0, whole.length - 40))
    const got = await obtainImage({ path: join(top, 'cut.tar.gz'), store: join(top, 'store'), identity: null, hidden: [] })
    expect(got).toMatchObject({ ok: false, error: expect.stringMatching(/refused: .*not a gzipped tar archive/) })
  })
})
