import { chmodSync, readFileSync, statSync, utimesSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { directoryDigest } from '../../src/workspace/environment/image-directory.js'
import { runSetup } from '../run/harness.js'
import { busyboxRoot, scratch } from './image-fixture.js'
import { makeOrigin } from './repo.js'

/*
 * A directory image's setup results are keyed by its file list, not its path
 * (docs/environments.md#an-image): the same directory unchanged is a cache hit; changed
 * in place (a file rewritten, even to the same size with its time put back, one added, a
 * mode or a time changed) it is a new key, and
 * setup runs again in it instead of restoring a result made against the old system.
 */

describe("a directory image's key", () => {
  it('is the same for the same tree, and changes with a size, a mode, a time or a new entry', () => {
    const root = busyboxRoot(join(scratch('ctxagent-imgdir-'), 'root'))
    const before = directoryDigest(root, 10_000)
    expect(before).toMatch(/^sha256:[0-9a-f]{64}$/)
    expect(directoryDigest(root, 10_000)).toBe(before)
    const keys = new Set([before])
    writeFileSync(join(root, 'etc', 'os-release'), 'NAME="busybox test image, upgraded"\n')
    keys.add(directoryDigest(root, 10_000))
    writeFileSync(join(root, 'usr', 'bin', 'new-tool'), '#!/bin/sh\n', { mode: 0o755 })
    keys.add(directoryDigest(root, 10_000))
    utimesSync(join(root, 'usr', 'bin', 'image-tool'), new Date(2000, 1, 1), new Date(2000, 1, 1))
    keys.add(directoryDigest(root, 10_000))
    chmodSync(join(root, 'etc', 'passwd'), 0o600)
    keys.add(directoryDigest(root, 10_000))
    // Rewritten with the same size, its modification time put back (as `touch -r` or `cp -p` would):
    // only the kernel's change time, which no one can set, says it changed.
    const edited = join(root, 'usr', 'bin', 'image-tool')
    const was = statSync(edited)
    const text = readFileSync(edited, 'utf8')
    const sameSize = text.replace(/[a-z]/, (c) => (c === 'a' ? 'b' : 'a'))
    expect(sameSize).not.toBe(text)
    expect(sameSize.length).toBe(text.length)
    const beforeEdit = directoryDigest(root, 10_000)
    writeFileSync(edited, sameSize)
    utimesSync(edited, was.atime, was.mtime)
    expect(statSync(edited).mtimeMs).toBe(was.mtimeMs)
    expect(statSync(edited).size).toBe(was.size)
    keys.add(directoryDigest(root, 10_000))
    expect(directoryDigest(root, 10_000)).not.toBe(beforeEdit)
    expect(keys.size).toBe(6)
    expect(() => directoryDigest(root, 10)).toThrow(/more than 10 entries/)
  })

  it('env prepare: a hit while the directory is unchanged, setup again once it changed in place', { timeout: 120_000 }, async () => {
    const root = busyboxRoot(join(scratch('ctxagent-imgdir-'), 'root'))
    const s = await runSetup('tools:\n  shell: true\n')
    const env = `image: ${root}\nsetup: |\n  mkdir -p deps\n  cat /etc/os-release > deps/os\ncache:\n  paths: [deps]\n`
    const origin = makeOrigin({ '.ctxagent/environment.yml': env })
    const prepare = async (): Promise<string> => {
      const r = await s.run(['env', 'prepare', '--workspace', origin.clone(), '--json'])
      expect(r.code, r.stderr).toBe(0)
      return (JSON.parse(r.stdout) as { cache: string }).cache
    }
    expect(await prepare()).toBe('miss')
    expect(await prepare()).toBe('hit')
    // The operator upgrades the image's system where it is: the old result is not restored.
    writeFileSync(join(root, 'etc', 'os-release'), 'NAME="busybox test image, upgraded"\n')
    expect(await prepare()).toBe('miss')
    expect(await prepare()).toBe('hit')
  })
})
