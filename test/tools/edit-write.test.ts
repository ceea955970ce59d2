import { chmodSync, existsSync, readdirSync, readFileSync, statSync, utimesSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { setup } from './fixture.js'

const edit = (old_string: string, new_string: string, extra: Record<string, unknown> = {}) => ({ path: 'src/app.js', old_string, new_string, ...extra })

describe('read before write', () => {
  it('edit_file refuses a file the task has not read', async () => {
    const s = setup()
    const out = await s.call('edit_file', edit('a = 1', 'a = 10'))
    expect(out).toMatchObject({ status: 'error', error: 'src/app.js has not been read by this task; read_file it first, then change it' })
    expect(readFileSync(join(s.ws, 'src', 'app.js'), 'utf8')).toBe('const a = 1\nconst b = 2\nexport { a, b }\n')
  })

  it('edit_file refuses a file changed since it was read, and works once it is read again', async () => {
    const s = setup()
    await s.call('read_file', { path: 'src/app.js' })
    writeFileSync(join(s.ws, 'src', 'app.js'), 'const a = 1\nconst b = 3\nexport { a, b }\n')
    // Same size: only the mtime tells the change.
    utimesSync(join(s.ws, 'src', 'app.js'), new Date(), new Date(Date.now() + 5000))
    expect((await s.call('edit_file', edit('a = 1', 'a = 10'))).output).toMatch(/changed since this task read it; read_file it again/)
    await s.call('read_file', { path: 'src/app.js' })
    const edited = await s.call('edit_file', edit('a = 1', 'a = 10'))
    expect(edited).toMatchObject({ status: 'success' })
    expect(edited.output).toBe('edited src/app.js: 1 replacement\n1: const a = 10\n2: const b = 3\n3: export { a, b }')
    expect(readFileSync(join(s.ws, 'src', 'app.js'), 'utf8')).toBe('const a = 10\nconst b = 3\nexport { a, b }\n')
    // Its own edit updates the stamp, so a second edit needs no new read.
    expect((await s.call('edit_file', edit('b = 3', 'b = 30'))).status).toBe('success')
    expect(s.reads.get('src/app.js')?.size).toBe(statSync(join(s.ws, 'src', 'app.js')).size)
  })

  it('write_file refuses to replace an existing file it has not read, and replaces it after a read', async () => {
    const s = setup()
    expect((await s.call('write_file', { path: 'src/app.js', content: 'x' })).output).toMatch(/has not been read by this task/)
    expect(readFileSync(join(s.ws, 'src', 'app.js'), 'utf8')).toBe('const a = 1\nconst b = 2\nexport { a, b }\n')
    await s.call('read_file', { path: 'src/app.js' })
    expect((await s.call('write_file', { path: 'src/app.js', content: 'x' })).output).toBe('replaced src/app.js (1 line, 1 byte)')
    expect(readFileSync(join(s.ws, 'src', 'app.js'), 'utf8')).toBe('x')
  })
})

describe('edit_file', () => {
  it('says which: no match (with why), several matches, the same text; replace_all replaces every one', async () => {
    const s = setup()
    writeFileSync(join(s.ws, 'dup.txt'), 'foo\nfoo\n  bar  baz\nlet total = price * count\n')
    await s.call('read_file', { path: 'dup.txt' })
    const call = (args: Record<string, unknown>) => s.call('edit_file', { path: 'dup.txt', ...args })
    expect((await call({ old_string: 'bar baz', new_string: 'x' })).output).toMatch(/matches if white space is ignored/)
    expect((await call({ old_string: '3:   bar', new_string: 'x' })).output).toMatch(/line-number prefixes/)
    expect((await call({ old_string: 'let total = price * amount', new_string: 'x' })).output).toBe(
      'Error: old_string was not found in dup.txt; the nearest line is 4: let total = price * count (read_file the file again and copy the text exactly)',
    )
    expect((await call({ old_string: 'qux', new_string: 'x' })).output).toBe(
      'Error: old_string was not found in dup.txt; read_file the file again and copy the text exactly',
    )
    expect((await call({ old_string: 'foo', new_string: 'x' })).output).toBe(
      'Error: old_string occurs 2 times in dup.txt; add surrounding lines to make it unique, or set replace_all: true',
    )
    expect((await call({ old_string: 'foo', new_string: 'foo' })).output).toMatch(/are the same; nothing would change/)
    expect((await call({ old_string: '', new_string: 'x' })).output).toMatch(/old_string is empty/)
    expect(readFileSync(join(s.ws, 'dup.txt'), 'utf8')).toBe('foo\nfoo\n  bar  baz\nlet total = price * count\n')
    expect((await call({ old_string: 'foo', new_string: 'x', replace_all: 'true' })).output).toMatch(/^edited dup.txt: 2 replacements\n/)
    expect(readFileSync(join(s.ws, 'dup.txt'), 'utf8')).toBe('x\nx\n  bar  baz\nlet total = price * count\n')
  })

  it('edits a CRLF file with the \\n line breaks read_file showed, keeping its CRLF', async () => {
    const s = setup()
    writeFileSync(join(s.ws, 'win.txt'), 'one\r\ntwo\r\nthree\r\n')
    await s.call('read_file', { path: 'win.txt' })
    const out = await s.call('edit_file', { path: 'win.txt', old_string: 'one\ntwo', new_string: 'one\n1.5\ntwo' })
    expect(out.output).toBe('edited win.txt: 1 replacement\n1: one\n2: 1.5\n3: two\n4: three')
    expect(readFileSync(join(s.ws, 'win.txt'), 'utf8')).toBe('one\r\n1.5\r\ntwo\r\nthree\r\n')
  })

  it('keeps $ patterns literal, keeps the file mode and leaves no temp file behind', async () => {
    const s = setup()
    const script = join(s.ws, 'run.sh')
    writeFileSync(script, '#!/bin/sh\necho old\n')
    chmodSync(script, 0o755)
    await s.call('read_file', { path: 'run.sh' })
    expect((await s.call('edit_file', { path: 'run.sh', old_string: 'echo old', new_string: "echo '$& $1'" })).status).toBe('success')
    expect(readFileSync(script, 'utf8')).toBe("#!/bin/sh\necho '$& $1'\n")
    expect(statSync(script).mode & 0o777).toBe(0o755)
    expect(readdirSync(s.ws).sort()).toEqual(['run.sh', 'src'])
  })
})

describe('write_file', () => {
  it('creates new files with their directories, inside the workspace only', async () => {
    const s = setup()
    const created = await s.call('write_file', { path: 'docs/new/notes.md', content: '# notes\n' })
    expect(created.output).toBe('created docs/new/notes.md (1 line, 8 bytes)')
    expect(readFileSync(join(s.ws, 'docs', 'new', 'notes.md'), 'utf8')).toBe('# notes\n')
    expect(existsSync(join(s.root, 'docs'))).toBe(false)
    // A file it created counts as read: it may replace it without reading it back.
    expect((await s.call('write_file', { path: 'docs/new/notes.md', content: '' })).output).toBe('replaced docs/new/notes.md (0 lines, 0 bytes)')
  })

  it('refuses a directory', async () => {
    const s = setup()
    expect((await s.call('write_file', { path: 'src', content: 'x' })).output).toBe('Error: src is a directory')
  })
})
