import { closeSync, existsSync, mkdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { ToolError } from '../../src/tools/errors.js'
import { boundaryOf, openDir, openFileRead, relOf, walkParent } from '../../src/tools/fd-walk.js'
import { setup } from './fixture.js'
import type { Fixture } from './fixture.js'

describe('the fd walk (fd-walk.ts)', () => {
  /** Where a path leads: its parent held open and the workspace-relative name, for existing and new paths. */
  const relOfPath = (s: Fixture, path: string) => {
    const b = boundaryOf(s.ctx)
    const parent = walkParent(b, path)
    try {
      return relOf(b, parent.dirFd, parent.name)
    } finally {
      parent.close()
    }
  }

  it('gives the workspace-relative path, for existing and new paths', () => {
    const s = setup()
    expect(relOfPath(s, 'src/app.js')).toBe('src/app.js')
    expect(relOfPath(s, './src/../src/deep.txt')).toBe('src/deep.txt')
    expect(relOfPath(s, '.')).toBe('.')
    expect(relOfPath(s, join(s.ws, 'src'))).toBe('src')
  })

  it('follows a link that stays inside to its target', () => {
    const s = setup()
    symlinkSync(join(s.ws, 'src'), join(s.ws, 'code'))
    symlinkSync('src/app.js', join(s.ws, 'alias.js'))
    for (const path of ['code/app.js', 'alias.js']) {
      const file = openFileRead(boundaryOf(s.ctx), path)
      closeSync(file.fd)
      expect(file.rel).toBe('src/app.js')
    }
  })

  it.each([
    ['..', '..'],
    ['.. inside a path', 'src/../../outside/secret.txt'],
    ['an absolute path outside', 'ABS'],
    ['a link to a file outside', 'link-file'],
    ['a path through a link to a directory outside', 'link-dir/secret.txt'],
    ['a new file under a link to a directory outside', 'link-dir/new/file.txt'],
    ['a dangling link', 'dangling'],
    ['a new file under a dangling link', 'dangling/file.txt'],
  ])('refuses %s with a ToolError', (_what, given) => {
    const s = setup()
    symlinkSync(join(s.outside, 'secret.txt'), join(s.ws, 'link-file'))
    symlinkSync(s.outside, join(s.ws, 'link-dir'))
    symlinkSync(join(s.outside, 'not-yet'), join(s.ws, 'dangling'))
    const path = given === 'ABS' ? join(s.outside, 'secret.txt') : given
    expect(() => openFileRead(boundaryOf(s.ctx), path)).toThrow(ToolError)
    expect(() => openFileRead(boundaryOf(s.ctx), path)).toThrow(/outside the workspace/)
  })

  it('says what is wrong in one line', () => {
    const s = setup()
    const b = boundaryOf(s.ctx)
    expect(() => openFileRead(b, 'nope.txt')).toThrow('nope.txt does not exist')
    expect(() => openFileRead(b, 'src')).toThrow('src is a directory; use list_dir to see what is in it')
    expect(() => openDir(b, 'src/app.js')).toThrow(/is a file, not a directory/)
    expect(() => walkParent(b, ' ')).toThrow(/path is empty/)
    expect(() => walkParent(b, 'a\0b')).toThrow(/NUL/)
  })
})

describe('every tool at the workspace boundary', () => {
  it.each([
    ['..', '../outside/secret.txt'],
    ['an absolute path', 'ABS'],
    ['a symlink to a file outside', 'link-file'],
    ['a path through a symlinked directory', 'link-dir/secret.txt'],
  ])('refuses %s, reading and writing nothing outside', async (_what, given) => {
    const s = setup()
    symlinkSync(join(s.outside, 'secret.txt'), join(s.ws, 'link-file'))
    symlinkSync(s.outside, join(s.ws, 'link-dir'))
    const path = given === 'ABS' ? join(s.outside, 'secret.txt') : given
    // A stamp as if the file had been read: the boundary must hold on its own, not thanks to read-before-write.
    s.reads.set(path, { mtimeMs: 0, size: 0 })
    const attempts = [
      await s.call('read_file', { path }),
      await s.call('write_file', { path, content: 'pwned' }),
      await s.call('edit_file', { path, old_string: 'TOP', new_string: 'pwned' }),
      await s.call('grep', { pattern: 'SECRET', path }),
      await s.call('list_dir', { path: given === 'link-dir/secret.txt' ? 'link-dir' : '..' }),
      await s.call('glob', { pattern: '*', path: given === 'link-dir/secret.txt' ? 'link-dir' : '../outside' }),
      await s.call('write_file', { path: 'link-dir/new.txt', content: 'pwned' }),
      await s.call('write_file', { path: 'link-dir/sub/new.txt', content: 'pwned' }),
    ]
    for (const outcome of attempts) {
      expect(outcome.status).toBe('error')
      expect(outcome.malformed).toBe(false)
      expect(outcome.output).not.toContain('TOP SECRET')
      expect(outcome.output).not.toContain('secret.txt\n')
    }
    expect(attempts[0]?.output).toMatch(/^Error: .* is outside the workspace/)
    s.outsideUntouched()
  })

  it('write_file through a dangling link creates nothing at its target', async () => {
    const s = setup()
    symlinkSync(join(s.outside, 'created.txt'), join(s.ws, 'dangling'))
    expect((await s.call('write_file', { path: 'dangling', content: 'pwned' })).status).toBe('error')
    s.outsideUntouched()
  })

  it('grep and glob never follow links out of the workspace', async () => {
    const s = setup()
    symlinkSync(s.outside, join(s.ws, 'link-dir'))
    symlinkSync(join(s.outside, 'secret.txt'), join(s.ws, 'src', 'link.txt'))
    expect((await s.call('grep', { pattern: 'SECRET' })).output).toBe('no matches for /SECRET/')
    expect((await s.call('glob', { pattern: '**/secret.txt' })).output).toMatch(/no files match/)
    expect((await s.call('list_dir', { depth: 5 })).output).toContain('link-dir (link)')
    expect((await s.call('list_dir', { depth: 5 })).output).not.toContain('secret.txt')
  })

  it('accepts an absolute path inside the workspace', async () => {
    const s = setup()
    expect((await s.call('read_file', { path: join(s.ws, 'src', 'app.js') })).output).toContain('1: const a = 1')
  })

  it('writes replace a link inside the workspace rather than writing through it', async () => {
    const s = setup()
    writeFileSync(join(s.ws, 'target.txt'), 'target\n')
    mkdirSync(join(s.ws, 'sub'))
    symlinkSync(join(s.ws, 'target.txt'), join(s.ws, 'sub', 'alias.txt'))
    // The alias resolves to target.txt, which is what gets read and written.
    await s.call('read_file', { path: 'sub/alias.txt' })
    expect((await s.call('write_file', { path: 'sub/alias.txt', content: 'new\n' })).output).toBe('replaced target.txt (1 line, 4 bytes)')
    expect(readFileSync(join(s.ws, 'target.txt'), 'utf8')).toBe('new\n')
    expect(existsSync(join(s.root, 'target.txt'))).toBe(false)
  })
})
