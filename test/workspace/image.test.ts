import { chmodSync, existsSync, lstatSync, mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { planSandbox } from '../../src/tools/sandbox.js'
import type { SandboxPlan } from '../../src/tools/sandbox.js'
import { obtainImage } from '../../src/workspace/environment/image.js'
import { runScript } from '../../src/workspace/environment/sandboxed.js'
import { giveToSandbox } from '../helpers/sandbox-owner.js'
import { busyboxRoot, dockerSave, ociLayout, scratch, tarOf, tarOfDir } from './image-fixture.js'

/*
 * An environment's image (docs/environments.md#an-image): a tiny busybox root as a
 * directory, an OCI layout of two layers (the second with whiteouts) and a docker save
 * archive, each unpacked into the cache and run in by the real sandbox with the host's
 * /usr absent; hostile layers refused with nothing written outside the cache.
 */

type Bwrap = Extract<SandboxPlan, { kind: 'bwrap' }>

/** What the repository's test command checks: busybox's sh runs it, the image's own tool is there, the host's git and PostgreSQL are not. */
const CHECK = [
  'set -e',
  'echo "shell: $(readlink /proc/$$/exe)"',
  '[ "$(readlink /proc/$$/exe)" = /bin/busybox ]',
  'for host_only in /usr/bin/git /usr/lib/postgresql /usr/bin/node; do if [ -e "$host_only" ]; then echo "HOST FILE $host_only"; exit 1; fi; done',
  'image-tool',
  'cat /etc/os-release',
  'echo CHECK-PASSED',
].join('\n')

function plan(ws: string): Bwrap {
  const planned = planSandbox({ sandbox: 'bwrap', network: false, sandbox_read_only: [] }, [], ws)
  if (!planned.ok || planned.plan.kind !== 'bwrap') throw new Error(planned.ok ? 'no bwrap plan' : planned.why)
  return planned.plan
}

function workspace(): string {
  const ws = join(scratch('ctxagent-imgws-'), 'ws')
  mkdirSync(ws)
  giveToSandbox(ws, null)
  return ws
}

async function runIn(root: string, script = CHECK) {
  const ws = workspace()
  return runScript({ plan: { ...plan(ws), root }, workspace: ws, script, hosts: null, timeoutMs: 60_000, log: null })
}

const identity = (ws: string) => (process.getuid?.() === 0 ? plan(ws).identity : null)

/** The two layers: the busybox root (and what the second hides), then a layer of whiteouts and a new tool. */
function layers(top: string): Buffer[] {
  const root = busyboxRoot(join(top, 'layer1'))
  writeFileSync(join(root, 'etc', 'removed-later'), 'hidden by layer 2\n')
  mkdirSync(join(root, 'opt', 'stuff'), { recursive: true })
  writeFileSync(join(root, 'opt', 'stuff', 'old'), 'old\n')
  const second = tarOf([
    { name: 'etc/.wh.removed-later' },
    { name: 'opt/stuff/.wh..wh..opq' },
    { name: 'opt/stuff/new', data: 'new\n' },
    { name: 'usr/bin/layer2-tool', data: '#!/bin/sh\necho layer2\n', mode: 0o755 },
  ])
  return [tarOfDir(root), second]
}

function expectLayered(root: string): void {
  expect(existsSync(join(root, 'etc', 'removed-later'))).toBe(false)
  expect(readdirSync(join(root, 'opt', 'stuff'))).toEqual(['new'])
  expect(existsSync(join(root, 'usr', 'bin', 'layer2-tool'))).toBe(true)
}

describe('an image root for the sandbox', () => {
  it("runs the repository's test command in a root file system directory, the host's /usr absent", { timeout: 60_000 }, async () => {
    const top = scratch('ctxagent-img-')
    const root = busyboxRoot(join(top, 'root'))
    const ws = workspace()
    const got = await obtainImage({ path: root, store: join(top, 'store'), identity: identity(ws), hidden: [] })
    expect(got).toMatchObject({ ok: true, root, record: { kind: 'directory', digest: null, cache: 'none' } })
    const r = await runIn(root)
    expect(r.tail).toContain('CHECK-PASSED')
    expect(r.tail).toContain('shell: /bin/busybox')
    expect(r.tail).toContain('image-tool from the image')
    expect(r.code).toBe(0)
    // Without the image, the same command sees the host's system: the check is one that can fail.
    const host = await runScript({ plan: plan(ws), workspace: ws, script: CHECK, hosts: null, timeoutMs: 60_000, log: null })
    expect(host.code).not.toBe(0)
  })

  it('unpacks an OCI layout of two layers (gzip, then whiteouts and an opaque directory) once, and runs in it', { timeout: 60_000 }, async () => {
    const top = scratch('ctxagent-img-')
    const [first, second] = layers(top) as [Buffer, Buffer]
    const layout = ociLayout(join(top, 'oci'), [
      { tar: first, gzip: true },
      { tar: second, gzip: false },
    ])
    const store = join(top, 'store')
    const ws = workspace()
    const a = await obtainImage({ path: layout, store, identity: identity(ws), hidden: [] })
    if (!a.ok) throw new Error(a.error)
    expect(a.record).toMatchObject({ kind: 'oci', cache: 'miss', digest: expect.stringMatching(/^sha256:[0-9a-f]{64}$/) })
    expectLayered(a.root)
    const r = await runIn(a.root, `${CHECK}\nlayer2-tool`)
    expect(r.tail).toContain('CHECK-PASSED')
    expect(r.tail).toContain('layer2')
    expect(r.code).toBe(0)
    const again = await obtainImage({ path: layout, store, identity: identity(ws), hidden: [] })
    expect(again).toMatchObject({ ok: true, root: a.root, record: { cache: 'hit', digest: a.record.digest } })
  })

  it('unpacks a docker save archive and runs in it; a layer whose content is not its digest is refused', { timeout: 60_000 }, async () => {
    const top = scratch('ctxagent-img-')
    const [first, second] = layers(top) as [Buffer, Buffer]
    const archive = dockerSave(join(top, 'image.tar'), [first, second], top)
    const ws = workspace()
    const got = await obtainImage({ path: archive, store: join(top, 'store'), identity: identity(ws), hidden: [] })
    if (!got.ok) throw new Error(got.error)
    expect(got.record).toMatchObject({ kind: 'docker-save', cache: 'miss' })
    expectLayered(got.root)
    const r = await runIn(got.root)
    expect(r.tail).toContain('CHECK-PASSED')
    expect(r.code).toBe(0)

    // The same archive with a layer changed after its config was written: refused, nothing kept.
    const tampered = tarOf([{ name: 'usr/bin/evil', data: 'evil\n' }])
    const bad = dockerSave(join(top, 'bad.tar'), [first, second], join(top, 'bad'))
    const work = join(top, 'bad', 'docker-save')
    const layerDir = readdirSync(work).find((n) => existsSync(join(work, n, 'layer.tar')) && readFileSync(join(work, n, 'layer.tar')).equals(second)) as string
    writeFileSync(join(work, layerDir, 'layer.tar'), tampered)
    const { execFileSync } = await import('node:child_process')
    execFileSync('tar', ['-C', work, '-cf', bad, '.'])
    const refused = await obtainImage({ path: bad, store: join(top, 'store2'), identity: identity(ws), hidden: [] })
    expect(refused).toMatchObject({ ok: false, error: expect.stringContaining('does not match its digest') })
    expect(
      readdirSync(join(top, 'store2'), { recursive: true })
        .map(String)
        .filter((p) => p.includes('evil')),
    ).toEqual([])
  })

  it('two tasks needing the same image at once: one unpacks it, the other waits and uses it', { timeout: 60_000 }, async () => {
    const top = scratch('ctxagent-img-')
    const layout = ociLayout(join(top, 'oci'), [{ tar: tarOfDir(busyboxRoot(join(top, 'root'))), gzip: true }])
    const store = join(top, 'store')
    const ws = workspace()
    const both = await Promise.all([0, 1].map(() => obtainImage({ path: layout, store, identity: identity(ws), hidden: [] })))
    const caches = both.map((b) => (b.ok ? b.record.cache : b.error)).sort()
    expect(caches).toEqual(['hit', 'miss'])
    expect(new Set(both.map((b) => (b.ok ? b.root : null))).size).toBe(1)
  })
})

describe('a hostile image', () => {
  const HOSTILE: [string, Parameters<typeof tarOf>[0], RegExp][] = [
    ['a ../ name', [{ name: '../../../escaped', data: 'x' }], /leaves the root/],
    ['an absolute name', [{ name: '/OUTSIDE/escaped', data: 'x' }], /absolute name/],
    [
      'a link, then a file through it',
      [
        { name: 'usr', type: 'dir' },
        { name: 'usr/out', type: 'symlink', linkname: 'OUTSIDE' },
        { name: 'usr/out/escaped', data: 'x' },
      ],
      /way passes a link/,
    ],
    ['a hard link to a file outside', [{ name: 'usr/passwd', type: 'link', linkname: '../../../etc/passwd' }], /leaves the root/],
  ]

  for (const [what, members, refusal] of HOSTILE) {
    it(`refuses ${what}, writing nothing outside the cache`, { timeout: 60_000 }, async () => {
      const top = scratch('ctxagent-imghostile-')
      const outside = join(top, 'OUTSIDE')
      mkdirSync(outside)
      // An absolute link target: where the link points on the host.
      const fixed = members.map((m) =>
        m.linkname === 'OUTSIDE' ? { ...m, linkname: outside } : m.name.startsWith('/OUTSIDE') ? { ...m, name: m.name.replace('/OUTSIDE', outside) } : m,
      )
      const base = tarOfDir(busyboxRoot(join(top, 'root')))
      const layout = ociLayout(join(top, 'oci'), [
        { tar: base, gzip: true },
        { tar: tarOf(fixed), gzip: false },
      ])
      const store = join(top, 'deep', 'store')
      const got = await obtainImage({ path: layout, store, identity: null, hidden: [] })
      expect(got).toMatchObject({ ok: false, error: expect.stringMatching(refusal) })
      expect(readdirSync(outside)).toEqual([])
      expect(existsSync(join(top, 'escaped')) || existsSync(join(top, 'deep', 'escaped')) || existsSync('/escaped')).toBe(false)
      // No entry was kept, nor the partial unpack.
      expect(
        readdirSync(store, { recursive: true })
          .map(String)
          .filter((p) => !p.endsWith('.lock')),
      ).toEqual([expect.stringMatching(/^[0-9a-f]{16}$/)])
    })
  }

  it.runIf(process.getuid?.() === 0)(
    "as root, is refused when the sandbox's user could not read it (a 0600 layer): an operator's private image is not unpacked for a repository",
    async () => {
      const top = scratch('ctxagent-imghostile-')
      const layout = ociLayout(join(top, 'oci'), [{ tar: tarOfDir(busyboxRoot(join(top, 'root'))), gzip: true }])
      const ws = workspace()
      const blobs = join(layout, 'blobs', 'sha256')
      const manifest = JSON.parse(readFileSync(join(layout, 'index.json'), 'utf8')).manifests[0].digest.slice(7)
      const layer = JSON.parse(readFileSync(join(blobs, manifest), 'utf8')).layers[0].digest.slice(7)
      chmodSync(join(blobs, layer), 0o600)
      const got = await obtainImage({ path: layout, store: join(top, 'store'), identity: identity(ws), hidden: [] })
      expect(got).toMatchObject({ ok: false, error: expect.stringMatching(/is not readable by .*whom the sandbox runs as/) })
      chmodSync(join(blobs, layer), 0o644)
      expect(await obtainImage({ path: layout, store: join(top, 'store'), identity: identity(ws), hidden: [] })).toMatchObject({ ok: true })
    },
  )

  it("does not set a directory's mode through a link a later layer put on its way", async () => {
    const top = scratch('ctxagent-imghostile-')
    const outside = join(top, 'OUTSIDE')
    mkdirSync(join(outside, 'b'), { recursive: true, mode: 0o755 })
    chmodSync(join(outside, 'b'), 0o755)
    const layout = ociLayout(join(top, 'oci'), [
      {
        tar: tarOf([
          { name: 'a', type: 'dir' },
          { name: 'a/b', type: 'dir', mode: 0o777 },
          { name: 'bin', type: 'dir' },
        ]),
        gzip: false,
      },
      { tar: tarOf([{ name: '.wh.a' }, { name: 'a', type: 'symlink', linkname: outside }]), gzip: false },
    ])
    const got = await obtainImage({ path: layout, store: join(top, 'store'), identity: null, hidden: [] })
    if (!got.ok) throw new Error(got.error)
    expect(lstatSync(join(got.root, 'a')).isSymbolicLink()).toBe(true)
    expect(statSync(join(outside, 'b')).mode & 0o777).toBe(0o755)
  })

  it('does not make a device node, and drops setuid and setgid bits', { timeout: 60_000 }, async () => {
    const top = scratch('ctxagent-imghostile-')
    const base = tarOfDir(busyboxRoot(join(top, 'root')))
    const layout = ociLayout(join(top, 'oci'), [
      { tar: base, gzip: true },
      {
        tar: tarOf([
          { name: 'dev', type: 'dir' },
          { name: 'dev/mem', type: 'char' },
          { name: 'usr/bin/suid', data: '#!/bin/sh\nid\n', mode: 0o6755 },
        ]),
        gzip: false,
      },
    ])
    const got = await obtainImage({ path: layout, store: join(top, 'store'), identity: null, hidden: [] })
    if (!got.ok) throw new Error(got.error)
    expect(existsSync(join(got.root, 'dev', 'mem'))).toBe(false)
    expect(statSync(join(got.root, 'usr', 'bin', 'suid')).mode & 0o7777).toBe(0o755)
    expect(lstatSync(join(got.root, 'bin', 'sh')).isSymbolicLink()).toBe(true)
  })

  it("is not bound through its own links: /usr as a link to the host's / shows nothing of the host", { timeout: 60_000 }, async () => {
    const top = scratch('ctxagent-imghostile-')
    const root = busyboxRoot(join(top, 'root'))
    const { rmSync, symlinkSync } = await import('node:fs')
    rmSync(join(root, 'usr'), { recursive: true })
    symlinkSync('/', join(root, 'usr'))
    symlinkSync('/etc/shadow', join(root, 'etc', 'hosts'))
    const r = await runIn(root, 'ls /usr/bin/git 2>&1; ls -l /usr; cat /etc/hosts 2>&1; echo done')
    expect(r.tail).toContain('done')
    // /usr is the link, resolved inside the sandbox (to its own /), where no host git is.
    expect(r.tail).not.toMatch(/^\/usr\/bin\/git$/m)
    expect(r.tail).not.toContain('root:')
  })
})
