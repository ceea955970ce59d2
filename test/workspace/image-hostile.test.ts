import { execFileSync, spawnSync } from 'node:child_process'
import { createHash } from 'node:crypto'
import { mkdirSync, readdirSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { gzipSync } from 'node:zlib'
import { describe, expect, it } from 'vitest'
import { planSandbox } from '../../src/tools/sandbox.js'
import type { SandboxPlan } from '../../src/tools/sandbox.js'
import { obtainImage } from '../../src/workspace/environment/image.js'
import { runScript } from '../../src/workspace/environment/sandboxed.js'
import { giveToSandbox, SANDBOX_GID, SANDBOX_UID } from '../helpers/sandbox-owner.js'
import { busyboxRoot, ociLayout, scratch, tarOf, tarOfDir } from './image-fixture.js'

/*
 * A hostile image's author against the unpacker's limits and modes, the OCI layout's
 * metadata, where an image may lie, and the sandbox that runs it (docs/environments.md#an-image,
 * docs/security.md#an-image).
 */

const sha = (b: Buffer | string): string => createHash('sha256').update(b).digest('hex')

function layout(top: string, layers: Buffer[], gzip = false): string {
  return ociLayout(
    join(top, 'oci'),
    layers.map((tar) => ({ tar, gzip })),
  )
}

function kept(store: string): string[] {
  return readdirSync(store, { recursive: true })
    .map(String)
    .filter((p) => !p.endsWith('.lock') && !/^[0-9a-f]{16}$/.test(p))
}

describe("an image's limits and modes", () => {
  it('a gzip bomb stops at the limit on tar bytes, with a line saying so, keeping nothing', async () => {
    const top = scratch('ctxagent-imglimit-')
    // 64 MB of zeros in a layer of about 64 KB.
    const bomb = gzipSync(
      tarOf([
        { name: 'bin', type: 'dir' },
        { name: 'zeros', data: '\0'.repeat(64 * 1024 * 1024) },
      ]),
    )
    expect(bomb.length).toBeLessThan(1024 * 1024)
    const oci = ociLayout(join(top, 'oci'), [{ tar: gzipSync(Buffer.alloc(0)), gzip: false }])
    const store = join(top, 'store')
    // The layout's layer swapped for the bomb (a gzip layer under its own digest).
    const blobs = join(oci, 'blobs', 'sha256')
    writeFileSync(join(blobs, sha(bomb)), bomb)
    const index = JSON.parse(readFileSync(join(oci, 'index.json'), 'utf8'))
    const manifest = JSON.parse(readFileSync(join(blobs, index.manifests[0].digest.slice(7)), 'utf8'))
    manifest.layers = [{ mediaType: 'application/vnd.oci.image.layer.v1.tar+gzip', digest: `sha256:${sha(bomb)}`, size: bomb.length }]
    const text = JSON.stringify(manifest)
    writeFileSync(join(blobs, sha(text)), text)
    index.manifests[0].digest = `sha256:${sha(text)}`
    writeFileSync(join(oci, 'index.json'), JSON.stringify(index))
    const got = await obtainImage({ path: oci, store, identity: null, hidden: [], limits: { bytes: 16 * 1024 * 1024, members: 1000 } })
    expect(got).toMatchObject({ ok: false, error: expect.stringMatching(/refused: layer 1 .*more than 16777216 bytes of tar \(ctxagent's limit\)/) })
    expect(kept(store)).toEqual([])
    // Under the default limit (32 GiB) the same image unpacks.
    const ok = await obtainImage({ path: oci, store, identity: null, hidden: [] })
    if (!ok.ok) throw new Error(ok.error)
    expect(statSync(join(ok.root, 'zeros')).size).toBe(64 * 1024 * 1024)
  })

  it('thousands of members unpack; past the members limit the image is refused', { timeout: 120_000 }, async () => {
    const top = scratch('ctxagent-imglimit-')
    const members = [
      { name: 'bin', type: 'dir' as const },
      ...Array.from({ length: 3000 }, (_, i) => ({ name: `usr/share/many/d${i % 50}/f${i}`, data: `${i}` })),
    ]
    const oci = layout(top, [tarOf(members)], true)
    const refused = await obtainImage({ path: oci, store: join(top, 'store'), identity: null, hidden: [], limits: { bytes: 1024 ** 3, members: 1000 } })
    expect(refused).toMatchObject({ ok: false, error: expect.stringMatching(/more than 1000 members \(ctxagent's limit\)/) })
    const got = await obtainImage({ path: oci, store: join(top, 'store'), identity: null, hidden: [] })
    if (!got.ok) throw new Error(got.error)
    expect(readdirSync(join(got.root, 'usr', 'share', 'many'), { recursive: true }).length).toBe(3050)
  })

  it("modes 07777 and 0000: nothing group- or world-writable in the cache, and every directory its owner's to remove (cleanup not as root)", async () => {
    const top = scratch('ctxagent-imgmodes-')
    const oci = layout(top, [
      tarOf([
        { name: 'bin', type: 'dir' },
        { name: 'open', type: 'dir', mode: 0o7777 },
        { name: 'open/wide', data: 'x', mode: 0o7777 },
        { name: 'sealed', type: 'dir', mode: 0o000 },
        { name: 'sealed/none', data: 'x', mode: 0o000 },
        { name: 'ro', type: 'dir', mode: 0o555 },
        { name: 'ro/file', data: 'x', mode: 0o444 },
      ]),
    ])
    const store = join(top, 'store')
    const got = await obtainImage({ path: oci, store, identity: null, hidden: [] })
    if (!got.ok) throw new Error(got.error)
    const mode = (p: string): number => statSync(join(got.root, p)).mode & 0o7777
    expect([mode('open'), mode('open/wide'), mode('sealed'), mode('sealed/none'), mode('ro'), mode('ro/file')]).toEqual([
      0o755, 0o755, 0o700, 0o000, 0o755, 0o444,
    ])
    // ctxagent as an unprivileged user owns its cache: that user can remove the entry.
    execFileSync('chown', ['-R', `${SANDBOX_UID}:${SANDBOX_GID}`, store])
    const entry = join(got.root, '..')
    const rm = spawnSync('rm', ['-rf', entry], { uid: SANDBOX_UID, gid: SANDBOX_GID, encoding: 'utf8' })
    expect(rm.stderr).toBe('')
    expect(readdirSync(join(entry, '..')).filter((n) => !n.endsWith('.lock'))).toEqual([])
  })
})

describe("an image's metadata", () => {
  function base(top: string): { oci: string; blobs: string; index: { manifests: [{ digest: string; mediaType: string; platform?: unknown }] } } {
    const oci = layout(top, [tarOf([{ name: 'bin', type: 'dir' }])])
    return { oci, blobs: join(oci, 'blobs', 'sha256'), index: JSON.parse(readFileSync(join(oci, 'index.json'), 'utf8')) }
  }
  const refused = async (top: string, oci: string, why: RegExp) => {
    const got = await obtainImage({ path: oci, store: join(top, 'store'), identity: null, hidden: [] })
    expect(got).toMatchObject({ ok: false, error: expect.stringMatching(why) })
  }

  it('a digest naming a path (sha256:../../x) is not followed', async () => {
    const top = scratch('ctxagent-imgmeta-')
    const { oci, index } = base(top)
    writeFileSync(join(top, 'x'), '{"layers":[]}')
    index.manifests[0].digest = 'sha256:../../../x'
    writeFileSync(join(oci, 'index.json'), JSON.stringify(index))
    await refused(top, oci, /has no sha256 digest/)
  })

  it('a manifest blob whose content is not its digest is refused', async () => {
    const top = scratch('ctxagent-imgmeta-')
    const { oci, blobs, index } = base(top)
    writeFileSync(join(blobs, index.manifests[0].digest.slice(7)), '{"layers":[{"digest":"sha256:00"}]}')
    await refused(top, oci, /blob does not match its digest/)
  })

  it('an index.json of more than 4 MB is refused unread; one that is a link is refused', async () => {
    const top = scratch('ctxagent-imgmeta-')
    const { oci, index } = base(top)
    const many = Array.from({ length: 40_000 }, () => ({ ...index.manifests[0], platform: { os: 'linux', architecture: 'riscv64' } }))
    writeFileSync(join(oci, 'index.json'), JSON.stringify({ manifests: many }))
    await refused(top, oci, /index\.json is larger than 4 MB/)
    // Many manifests, under 4 MB, none for this platform.
    writeFileSync(join(oci, 'index.json'), JSON.stringify({ manifests: many.slice(0, 2000) }))
    await refused(top, oci, /lists 2000 manifests and not exactly one for linux/)
    writeFileSync(join(top, 'elsewhere.json'), JSON.stringify(index))
    rmSync(join(oci, 'index.json'))
    symlinkSync(join(top, 'elsewhere.json'), join(oci, 'index.json'))
    await refused(top, oci, /index\.json is missing \(or not a regular file\)/)
  })

  it('a layer blob that is a link to a file outside the layout is refused, even with the right content', async () => {
    const top = scratch('ctxagent-imgmeta-')
    const layer = tarOf([{ name: 'bin', type: 'dir' }])
    const oci = layout(top, [layer])
    const blob = join(oci, 'blobs', 'sha256', sha(layer))
    writeFileSync(join(top, 'outside.tar'), layer)
    rmSync(blob)
    symlinkSync(join(top, 'outside.tar'), blob)
    await refused(top, oci, /layer 1's blob is missing \(or not a regular file\)/)
  })
})

describe('where an image may lie', () => {
  it("an image in the task's workspace (or reached through a link into it), or in a hidden place, is refused: an agent could have written it", async () => {
    const top = scratch('ctxagent-imgwhere-')
    const ws = join(top, 'ws')
    mkdirSync(ws)
    const inWs = busyboxRoot(join(ws, 'rootfs'))
    symlinkSync(inWs, join(top, 'innocent'))
    const store = join(top, 'store')
    for (const path of [inWs, join(top, 'innocent')]) {
      const got = await obtainImage({ path, store, identity: null, hidden: [], workspace: ws })
      expect(got).toMatchObject({ ok: false, error: expect.stringContaining(`lies in ${ws}`) })
    }
    const tree = join(top, 'tasks')
    const oci = ociLayout(join(tree, 'oci'), [{ tar: tarOf([{ name: 'bin', type: 'dir' }]), gzip: false }])
    expect(await obtainImage({ path: oci, store, identity: null, hidden: [tree], workspace: ws })).toMatchObject({
      ok: false,
      error: expect.stringContaining(`lies in ${tree}`),
    })
    // The same directory outside them is an image.
    expect(await obtainImage({ path: inWs, store, identity: null, hidden: [] })).toMatchObject({ ok: true })
  })
})

type Bwrap = Extract<SandboxPlan, { kind: 'bwrap' }>

describe('a command in an image', () => {
  it.runIf(spawnSync('gcc', ['--version']).status === 0)(
    "cannot have the host's prlimit or the forwarder load its library (/etc/ld.so.preload), nor write under /run/ctxagent/host; the limits are the same as without an image",
    { timeout: 120_000 },
    async () => {
      const top = scratch('ctxagent-imgrun-')
      const ws = join(top, 'ws')
      mkdirSync(ws)
      giveToSandbox(ws, null)
      const root = busyboxRoot(join(top, 'root'))
      // A library that leaves a mark in the workspace when any program loads it.
      const src = join(top, 'evil.c')
      writeFileSync(src, `#include <fcntl.h>\n__attribute__((constructor)) static void mark(void) { open("${ws}/PRELOADED", O_CREAT | O_WRONLY, 0644); }\n`)
      mkdirSync(join(root, 'usr', 'lib'), { recursive: true })
      execFileSync('gcc', ['-shared', '-fPIC', '-o', join(root, 'usr', 'lib', 'evil.so'), src])
      writeFileSync(join(root, 'etc', 'ld.so.preload'), '/usr/lib/evil.so\n')
      const planned = planSandbox({ sandbox: 'bwrap', network: false, sandbox_read_only: [] }, [], ws)
      if (!planned.ok || planned.plan.kind !== 'bwrap') throw new Error('no bwrap plan')
      const plan: Bwrap = planned.plan
      const script = [
        'cat /proc/self/limits',
        'test -e /etc/ld.so.preload && echo PRELOAD-VISIBLE',
        'for f in /run/ctxagent/host/prlimit /run/ctxagent/host/lib/planted.so; do (echo x > "$f") 2>/dev/null && echo "WROTE $f"; done',
        'echo RAN',
      ].join('\n')
      // Behind the proxy too: the forwarder (the host's node) starts first.
      const image = await runScript({ plan: { ...plan, root }, workspace: ws, script, hosts: ['registry.test'], timeoutMs: 60_000, log: null })
      expect(image.tail).toContain('RAN')
      expect(image.tail).not.toContain('PRELOAD-VISIBLE')
      expect(image.tail).not.toContain('WROTE')
      expect(readdirSync(ws)).toEqual([])
      const host = await runScript({ plan, workspace: ws, script: 'cat /proc/self/limits', hosts: null, timeoutMs: 60_000, log: null })
      const limits = (t: string) => t.split('\n').filter((l) => /^Max /.test(l))
      expect(limits(image.tail).length).toBeGreaterThan(5)
      expect(limits(image.tail)).toEqual(limits(host.tail))
    },
  )

  it('an image of only a layer: the host /usr is absent even through a layer whose /usr links to /', { timeout: 60_000 }, async () => {
    const top = scratch('ctxagent-imgrun-')
    const ws = join(top, 'ws')
    mkdirSync(ws)
    giveToSandbox(ws, null)
    const oci = ociLayout(join(top, 'oci'), [
      { tar: tarOfDir(busyboxRoot(join(top, 'root'))), gzip: true },
      {
        tar: tarOf([
          { name: '.wh.usr' },
          { name: 'usr', type: 'symlink', linkname: '/' },
          { name: 'etc/.wh.passwd' },
          { name: 'etc/passwd', type: 'symlink', linkname: '/proc/1/root/etc/shadow' },
        ]),
        gzip: false,
      },
    ])
    const got = await obtainImage({ path: oci, store: join(top, 'store'), identity: null, hidden: [] })
    if (!got.ok) throw new Error(got.error)
    const planned = planSandbox({ sandbox: 'bwrap', network: false, sandbox_read_only: [] }, [], ws)
    if (!planned.ok || planned.plan.kind !== 'bwrap') throw new Error('no bwrap plan')
    const r = await runScript({
      plan: { ...planned.plan, root: got.root },
      workspace: ws,
      script: 'ls /usr/bin/git /usr/lib/postgresql 2>&1; cat /etc/passwd 2>&1; cat /proc/1/root/etc/shadow 2>&1; echo END',
      hosts: null,
      timeoutMs: 60_000,
      log: null,
    })
    expect(r.tail).toContain('END')
    expect(r.tail).not.toMatch(/^\/usr\/bin\/git$/m)
    expect(r.tail).not.toMatch(/root:[^:]*:\d+/)
  })
})
