import { closeSync, ftruncateSync, openSync, statSync, writeFileSync, writeSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { setup } from './fixture.js'

describe('read_file', () => {
  it('numbers lines, pages with offset/limit and says where the file ends', async () => {
    const s = setup()
    writeFileSync(join(s.ws, 'long.txt'), Array.from({ length: 30 }, (_, i) => `line ${i + 1}`).join('\n'))
    const page = await s.call('read_file', { path: 'long.txt', offset: 10, limit: 5 })
    expect(page.output).toBe('10: line 10\n11: line 11\n12: line 12\n13: line 13\n14: line 14\n(lines 10-14 shown; use offset=15 to read more)')
    expect((await s.call('read_file', { path: 'long.txt', offset: '28' })).output).toBe('28: line 28\n29: line 29\n30: line 30\n(end of file, 30 lines)')
    expect((await s.call('read_file', { path: 'long.txt', offset: 31 })).output).toBe('(the file has 30 lines; offset 31 is past its end)')
  })

  it('shows a file of exactly `limit` lines as ending, and strips CR of CRLF lines', async () => {
    const s = setup()
    writeFileSync(join(s.ws, 'crlf.txt'), 'one\r\ntwo\r\n')
    expect((await s.call('read_file', { path: 'crlf.txt', limit: 2 })).output).toBe('1: one\n2: two\n(end of file, 2 lines)')
    writeFileSync(join(s.ws, 'empty.txt'), '')
    expect((await s.call('read_file', { path: 'empty.txt' })).output).toBe('(empty.txt is empty)')
  })

  it('cuts long lines with a marker and caps the result at 50 KB', async () => {
    const s = setup()
    writeFileSync(join(s.ws, 'wide.txt'), `${'x'.repeat(5000)}\n${'y\n'.repeat(100)}`)
    const wide = await s.call('read_file', { path: 'wide.txt', limit: 2 })
    expect(wide.output).toBe(`1: ${'x'.repeat(2000)}… [line cut: 5,000 characters]\n2: y\n(lines 1-2 shown; use offset=3 to read more)`)
    writeFileSync(join(s.ws, 'big.txt'), `${'z'.repeat(1000)}\n`.repeat(2000))
    const big = await s.call('read_file', { path: 'big.txt' })
    expect(Buffer.byteLength(big.output)).toBeLessThanOrEqual(50_000)
    const next = Number(/use offset=(\d+) to read more\)$/.exec(big.output)?.[1])
    expect(next).toBeGreaterThan(40)
    expect(big.output).toContain(`${next - 1}: zzz`)
    expect((await s.call('read_file', { path: 'big.txt', offset: next, limit: 1 })).output).toMatch(new RegExp(`^${next}: z+\\n`))
  })

  it('reads a page of a huge file, and a huge single line, without holding it', async () => {
    const s = setup()
    // Sparse 1 GB files: text first, then (unwritten) zero bytes past the 8 KB binary check.
    const sparse = (name: string, head: string) => {
      const fd = openSync(join(s.ws, name), 'w')
      writeSync(fd, head)
      ftruncateSync(fd, 1024 ** 3)
      closeSync(fd)
    }
    sparse('huge.log', Array.from({ length: 5000 }, (_, i) => `entry ${i + 1}`).join('\n'))
    const page = await s.call('read_file', { path: 'huge.log', offset: 4000, limit: 3 })
    expect(page.output).toBe('4000: entry 4000\n4001: entry 4001\n4002: entry 4002\n(lines 4000-4002 shown; use offset=4003 to read more)')
    sparse('one-line.dat', 'a'.repeat(9000))
    const line = await s.call('read_file', { path: 'one-line.dat' })
    expect(line.status).toBe('success')
    expect(line.output).toMatch(/^1: a{2000}… \[line cut: [\d,]+ characters\]\n\(line 1 is over 16 MB long; read_file cannot page past it\)$/)
  })

  it('records what it read for edit_file, by workspace-relative path', async () => {
    const s = setup()
    await s.call('read_file', { path: './src//app.js' })
    const stat = statSync(join(s.ws, 'src', 'app.js'))
    expect(s.reads.get('src/app.js')).toEqual({ mtimeMs: stat.mtimeMs, size: stat.size })
  })

  it('refuses binary files and directories, and suggests near names for a missing file', async () => {
    const s = setup()
    writeFileSync(join(s.ws, 'image.png'), Buffer.from([0x89, 0x50, 0x4e, 0x47, 0, 0, 1]))
    writeFileSync(join(s.ws, 'src', 'apps.js'), '')
    writeFileSync(join(s.ws, 'src', 'zebra.js'), '')
    const binary = await s.call('read_file', { path: 'image.png' })
    expect(binary).toMatchObject({ status: 'error', error: 'image.png is a binary file (7 bytes); read_file shows text only' })
    expect(s.reads.get('image.png')).toBeUndefined()
    expect((await s.call('read_file', { path: 'src' })).output).toBe('Error: src is a directory; use list_dir to see what is in it')
    expect((await s.call('read_file', { path: 'src/ap.js' })).output).toBe('Error: src/ap.js does not exist; did you mean app.js, apps.js?')
    expect((await s.call('read_file', { path: 'src/qqqqqqqq.py' })).output).toBe('Error: src/qqqqqqqq.py does not exist')
  })
})
