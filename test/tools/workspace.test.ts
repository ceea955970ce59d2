import { existsSync, mkdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { ToolError } from '../../src/tools/errors.js'
import { resolveInWorkspace } from '../../src/tools/workspace.js'
import { setup } from './fixture.js'

describe('resolveInWorkspace', () => {
  it('gives the real path and the workspace-relative one, for existing and new paths', () => {
    const s = setup()
    expect(resolveInWorkspace(s.ws, 'src/app.js')).toEqual({ real: join(s.ws, 'src', 'app.js'), rel: 'src/app.js', exists: true })
    expect(resolveInWorkspace(s.ws, './src/../src/new/deep.txt')).toEqual({ real: join(s.ws, 'src', 'new', 'deep.txt'), rel: 'src/new/deep.txt', exists: false })
    expect(resolveInWorkspace(s.ws, '.')).toMatchObject({ real: s.ws, rel: '.', exists: true })
    expect(resolveInWorkspace(s.ws, join(s.ws, 'src'))).toMatchObject({ rel: 'src', exists: true })
  })

  it('resolves a link that stays inside to its target', () => {
    const s = setup()
    symlinkSync(join(s.ws, 'src'), join(s.ws, 'code'))
    expect(resolveInWorkspace(s.ws, 'code/app.js')).toMatchObject({ rel: 'src/app.js', exists: true })
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
    expect(() => resolveInWorkspace(s.ws, path)).toThrow(ToolError)
    expect(() => resolveInWorkspace(s.ws, path)).toThrow(/outside the workspace|symbolic link/)
  })

  it('mustExist and kind say what is wrong in one line', () => {
    const s = setup()
    expect(() => resolveInWorkspace(s.ws, 'nope.txt', { mustExist: true })).toThrow('nope.txt does not exist')
    expect(() => resolveInWorkspace(s.ws, 'src', { kind: 'file' })).toThrow('src is a directory; use list_dir to see what is in it')
    expect(() => resolveInWorkspace(s.ws, 'src/app.js', { kind: 'directory' })).toThrow(/is a file, not a directory/)
    expect(() => resolveInWorkspace(s.ws, ' ')).toThrow(/path is empty/)
    expect(() => resolveInWorkspace(s.ws, 'a\0b')).toThrow(/NUL/)
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
