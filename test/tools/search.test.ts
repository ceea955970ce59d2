import { mkdirSync, utimesSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { setup } from './fixture.js'

describe('list_dir', () => {
  it('shows an indented tree, directories first with a trailing /, skipping node_modules and .git', async () => {
    const s = setup()
    mkdirSync(join(s.ws, 'node_modules', 'lib'), { recursive: true })
    mkdirSync(join(s.ws, '.git', 'objects'), { recursive: true })
    mkdirSync(join(s.ws, 'src', 'deep', 'deeper'), { recursive: true })
    writeFileSync(join(s.ws, 'README.md'), '')
    expect((await s.call('list_dir', {})).output).toBe('./\n  .git/ (not listed)\n  node_modules/ (not listed)\n  src/\n    deep/\n    app.js\n  README.md')
    expect((await s.call('list_dir', { path: 'src', depth: 3 })).output).toBe('src/\n  deep/\n    deeper/\n  app.js')
  })

  it('says how many entries were left out past the limit', async () => {
    const s = setup()
    for (let i = 0; i < 10; i++) writeFileSync(join(s.ws, `f${i}.txt`), '')
    const out = (await s.call('list_dir', { limit: 3 })).output
    // 12 entries in all within depth 2 (src/, src/app.js, f0..f9): 3 shown.
    expect(out).toBe('./\n  src/\n    app.js\n  f0.txt\n(9 more entries not shown; raise limit, lower depth or list a subdirectory)')
  })

  it('refuses a file and a missing directory', async () => {
    const s = setup()
    expect((await s.call('list_dir', { path: 'src/app.js' })).output).toMatch(/is a file, not a directory/)
    expect((await s.call('list_dir', { path: 'nope' })).output).toBe('Error: nope does not exist')
  })
})

describe('glob', () => {
  it('lists workspace-relative paths newest first, at most 100, saying how many more matched', async () => {
    const s = setup()
    for (let i = 0; i < 120; i++) {
      writeFileSync(join(s.ws, `m${i}.ts`), '')
      utimesSync(join(s.ws, `m${i}.ts`), new Date(), new Date(1_700_000_000_000 + i * 1000))
    }
    const out = (await s.call('glob', { pattern: '*.ts' })).output.split('\n')
    expect(out[0]).toBe('m119.ts')
    expect(out[99]).toBe('m20.ts')
    expect(out).toHaveLength(101)
    expect(out[100]).toBe('(20 more matches not shown; narrow the pattern or the path)')
  })

  it('matches paths under a directory and skips node_modules', async () => {
    const s = setup()
    mkdirSync(join(s.ws, 'node_modules', 'x'), { recursive: true })
    writeFileSync(join(s.ws, 'node_modules', 'x', 'index.js'), '')
    mkdirSync(join(s.ws, 'src', 'lib'))
    writeFileSync(join(s.ws, 'src', 'lib', 'util.js'), '')
    utimesSync(join(s.ws, 'src', 'lib', 'util.js'), new Date(), new Date(Date.now() + 10_000))
    expect((await s.call('glob', { pattern: '**/*.js' })).output).toBe('src/lib/util.js\nsrc/app.js')
    expect((await s.call('glob', { pattern: 'lib/*.js', path: 'src' })).output).toBe('src/lib/util.js')
    expect((await s.call('glob', { pattern: '*.py' })).output).toBe('no files match *.py')
  })
})

describe('grep', () => {
  it('groups path:line: text by file and honours include', async () => {
    const s = setup()
    writeFileSync(join(s.ws, 'src', 'b.ts'), 'const a = 1\nlet c\r\nconst a2 = 3\n')
    expect((await s.call('grep', { pattern: 'const a', include: '*.js' })).output).toBe('src/app.js:1: const a = 1\n(1 match in 1 file)')
    expect((await s.call('grep', { pattern: 'const a\\d? =' })).output).toBe(
      'src/app.js:1: const a = 1\n\nsrc/b.ts:1: const a = 1\nsrc/b.ts:3: const a2 = 3\n(3 matches in 2 files)',
    )
    expect((await s.call('grep', { pattern: 'c$', path: 'src/b.ts' })).output).toBe('src/b.ts:2: let c\n(1 match in 1 file)')
  })

  it('says when the limit was hit, cuts long lines, and skips binary and large files', async () => {
    const s = setup()
    writeFileSync(join(s.ws, 'wide.txt'), `needle ${'w'.repeat(1000)}\n`)
    writeFileSync(join(s.ws, 'blob.bin'), Buffer.concat([Buffer.from('needle\n'), Buffer.from([0, 1, 2])]))
    writeFileSync(join(s.ws, 'large.txt'), `needle\n${'x'.repeat(3 * 1024 * 1024)}`)
    expect((await s.call('grep', { pattern: 'needle' })).output).toBe(`wide.txt:1: needle ${'w'.repeat(493)}… [cut]\n(1 match in 1 file)`)
    expect((await s.call('grep', { pattern: 'const', limit: 1 })).output).toBe(
      'src/app.js:1: const a = 1\n(limit of 1 matches reached; narrow the pattern, path or include, or raise limit)',
    )
  })

  it('answers an invalid regex with an error naming it', async () => {
    const s = setup()
    const out = await s.call('grep', { pattern: '(unclosed' })
    expect(out).toMatchObject({ status: 'error', malformed: false })
    expect(out.output).toMatch(/^Error: invalid regular expression "\(unclosed" \(RE2 syntax: no backreferences or lookaround\): /)
  })
})
