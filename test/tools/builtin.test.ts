import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, utimesSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, expect, it, onTestFinished } from 'vitest'
import { ToolRegistry, parseArguments } from '../../src/tools/registry.js'
import type { ReadStamp, ToolContext } from '../../src/tools/types.js'

function setup(options: { signal?: AbortSignal } = {}) {
  const root = mkdtempSync(join(tmpdir(), 'ctxagent-tools-'))
  onTestFinished(() => rmSync(root, { recursive: true, force: true }))
  const ws = join(root, 'ws')
  const outside = join(root, 'outside')
  mkdirSync(join(ws, 'src'), { recursive: true })
  mkdirSync(outside)
  writeFileSync(join(outside, 'secret.txt'), 'TOP SECRET\n')
  writeFileSync(join(ws, 'src', 'app.js'), 'const a = 1\nconst b = 2\nexport { a, b }\n')
  const reads = new Map<string, ReadStamp>()
  const ctx: ToolContext = {
    workspace: ws,
    signal: options.signal ?? new AbortController().signal,
    commandTimeoutSeconds: 120,
    reads: { get: (p) => reads.get(p), set: (p, s) => void reads.set(p, s) },
  }
  const tools = ToolRegistry.builtin({ allowShell: true })
  let n = 0
  const call = (name: string, args: Record<string, unknown> | string) =>
    tools.call({ id: `c${n++}`, type: 'function', function: { name, arguments: typeof args === 'string' ? args : JSON.stringify(args) } }, ctx)
  return { root, ws, outside, ctx, tools, call, reads }
}

const outsideUntouched = (outside: string) => {
  expect(readdirSync(outside)).toEqual(['secret.txt'])
  expect(readFileSync(join(outside, 'secret.txt'), 'utf8')).toBe('TOP SECRET\n')
}

describe('the workspace boundary', () => {
  it.each([
    ['..', '../outside/secret.txt'],
    ['an absolute path', 'ABS'],
    ['a symlink to a file outside', 'link-file'],
    ['a path through a symlinked directory', 'link-dir/secret.txt'],
  ])('refuses %s for every tool, reading and writing nothing outside', async (_what, given) => {
    const s = setup()
    symlinkSync(join(s.outside, 'secret.txt'), join(s.ws, 'link-file'))
    symlinkSync(s.outside, join(s.ws, 'link-dir'))
    const path = given === 'ABS' ? join(s.outside, 'secret.txt') : given
    const attempts = [
      await s.call('read_file', { path }),
      await s.call('write_file', { path, content: 'pwned' }),
      await s.call('edit_file', { path, old_string: 'TOP', new_string: 'pwned' }),
      await s.call('grep', { pattern: 'SECRET', path }),
      await s.call('list_dir', { path: given === 'link-dir/secret.txt' ? 'link-dir' : '..' }),
      await s.call('glob', { pattern: '*', path: '../outside' }),
      await s.call('write_file', { path: 'link-dir/new.txt', content: 'pwned' }),
    ]
    for (const outcome of attempts) {
      expect(outcome.status).toBe('error')
      expect(outcome.output).not.toContain('TOP SECRET')
    }
    expect(attempts[0]?.output).toMatch(/outside the workspace/)
    outsideUntouched(s.outside)
  })

  it('grep and glob never follow links out of the workspace', async () => {
    const s = setup()
    symlinkSync(s.outside, join(s.ws, 'link-dir'))
    symlinkSync(join(s.outside, 'secret.txt'), join(s.ws, 'src', 'link.txt'))
    expect((await s.call('grep', { pattern: 'SECRET' })).output).not.toContain('TOP SECRET')
    expect((await s.call('glob', { pattern: '**/secret.txt' })).output).toMatch(/no files match/)
  })

  it('accepts an absolute path inside the workspace', async () => {
    const s = setup()
    expect((await s.call('read_file', { path: join(s.ws, 'src', 'app.js') })).output).toContain('1: const a = 1')
  })
})

describe('read_file', () => {
  it('numbers lines, pages with offset/limit and says where the file ends', async () => {
    const s = setup()
    writeFileSync(join(s.ws, 'long.txt'), Array.from({ length: 30 }, (_, i) => `line ${i + 1}`).join('\n'))
    const page = await s.call('read_file', { path: 'long.txt', offset: 10, limit: 5 })
    expect(page.output).toBe('10: line 10\n11: line 11\n12: line 12\n13: line 13\n14: line 14\n(lines 10-14 shown; use offset=15 to read more)')
    expect((await s.call('read_file', { path: 'long.txt', offset: '28' })).output).toBe('28: line 28\n29: line 29\n30: line 30\n(end of file, 30 lines)')
  })

  it('cuts long lines and caps the result at 50 KB', async () => {
    const s = setup()
    writeFileSync(join(s.ws, 'wide.txt'), `${'x'.repeat(5000)}\n${'y\n'.repeat(100)}`)
    expect((await s.call('read_file', { path: 'wide.txt', limit: 1 })).output).toContain('… [line cut at 2000 characters]')
    writeFileSync(join(s.ws, 'big.txt'), `${'z'.repeat(1000)}\n`.repeat(2000))
    const big = await s.call('read_file', { path: 'big.txt' })
    expect(big.output.length).toBeLessThanOrEqual(51_000)
    expect(big.output).toMatch(/use offset=\d+ to read more\)$/)
  })

  it('refuses binary files and directories, and suggests near names for a missing file', async () => {
    const s = setup()
    writeFileSync(join(s.ws, 'image.png'), Buffer.from([0x89, 0x50, 0x4e, 0x47, 0, 0, 1]))
    expect((await s.call('read_file', { path: 'image.png' })).output).toMatch(/binary file/)
    expect((await s.call('read_file', { path: 'src' })).output).toMatch(/is a directory; use list_dir/)
    expect((await s.call('read_file', { path: 'src/ap.js' })).output).toMatch(/does not exist; did you mean app.js\?/)
  })
})

describe('edit_file and write_file', () => {
  it('refuse a file the task has not read, or that changed since it was read', async () => {
    const s = setup()
    expect((await s.call('edit_file', { path: 'src/app.js', old_string: 'a = 1', new_string: 'a = 10' })).output).toMatch(/has not been read by this task/)
    expect((await s.call('write_file', { path: 'src/app.js', content: 'x' })).output).toMatch(/has not been read/)
    await s.call('read_file', { path: 'src/app.js' })
    writeFileSync(join(s.ws, 'src', 'app.js'), 'const a = 1\nconst b = 3\nexport { a, b }\n')
    utimesSync(join(s.ws, 'src', 'app.js'), new Date(), new Date(Date.now() + 5000))
    expect((await s.call('edit_file', { path: 'src/app.js', old_string: 'a = 1', new_string: 'a = 10' })).output).toMatch(/changed since this task read it/)
    await s.call('read_file', { path: 'src/app.js' })
    const edited = await s.call('edit_file', { path: 'src/app.js', old_string: 'a = 1', new_string: 'a = 10' })
    expect(edited).toMatchObject({ status: 'success' })
    expect(edited.output).toContain('1: const a = 10')
    expect(readFileSync(join(s.ws, 'src', 'app.js'), 'utf8')).toBe('const a = 10\nconst b = 3\nexport { a, b }\n')
    // Its own edit does not make the file stale.
    expect((await s.call('edit_file', { path: 'src/app.js', old_string: 'b = 3', new_string: 'b = 30' })).status).toBe('success')
  })

  it('say which: no match, several matches, the same text; replace_all replaces every one', async () => {
    const s = setup()
    writeFileSync(join(s.ws, 'dup.txt'), 'foo\nfoo\n  bar  baz\n')
    await s.call('read_file', { path: 'dup.txt' })
    expect((await s.call('edit_file', { path: 'dup.txt', old_string: 'qux', new_string: 'x' })).output).toMatch(/not found/)
    expect((await s.call('edit_file', { path: 'dup.txt', old_string: 'bar baz', new_string: 'x' })).output).toMatch(/matches if white space is ignored/)
    expect((await s.call('edit_file', { path: 'dup.txt', old_string: '3:   bar', new_string: 'x' })).output).toMatch(/line-number prefixes/)
    expect((await s.call('edit_file', { path: 'dup.txt', old_string: 'foo', new_string: 'x' })).output).toMatch(/occurs 2 times/)
    expect((await s.call('edit_file', { path: 'dup.txt', old_string: 'foo', new_string: 'foo' })).output).toMatch(/the same/)
    expect((await s.call('edit_file', { path: 'dup.txt', old_string: 'foo', new_string: 'x', replace_all: 'true' })).output).toMatch(/2 replacements/)
    expect(readFileSync(join(s.ws, 'dup.txt'), 'utf8')).toBe('x\nx\n  bar  baz\n')
  })

  it('write_file creates new files with their directories, inside the workspace only', async () => {
    const s = setup()
    const created = await s.call('write_file', { path: 'docs/new/notes.md', content: '# notes\n' })
    expect(created.output).toBe('created docs/new/notes.md (1 line, 8 bytes)')
    expect(readFileSync(join(s.ws, 'docs', 'new', 'notes.md'), 'utf8')).toBe('# notes\n')
    expect(existsSync(join(s.root, 'docs'))).toBe(false)
  })
})

describe('list_dir, glob, grep', () => {
  it('list_dir shows a tree and skips node_modules and .git', async () => {
    const s = setup()
    mkdirSync(join(s.ws, 'node_modules', 'lib'), { recursive: true })
    mkdirSync(join(s.ws, '.git'))
    writeFileSync(join(s.ws, 'README.md'), '')
    expect((await s.call('list_dir', {})).output).toBe('./\n  .git/ (not listed)\n  node_modules/ (not listed)\n  src/\n    app.js\n  README.md')
    for (let i = 0; i < 10; i++) writeFileSync(join(s.ws, `f${i}.txt`), '')
    expect((await s.call('list_dir', { limit: 3 })).output).toMatch(/\(\d+ more entries not shown/)
  })

  it('glob lists newest first, at most 100', async () => {
    const s = setup()
    for (let i = 0; i < 120; i++) {
      writeFileSync(join(s.ws, `m${i}.ts`), '')
      utimesSync(join(s.ws, `m${i}.ts`), new Date(), new Date(1_700_000_000_000 + i * 1000))
    }
    const out = (await s.call('glob', { pattern: '*.ts' })).output.split('\n')
    expect(out[0]).toBe('m119.ts')
    expect(out).toHaveLength(101)
    expect(out[100]).toBe('(20 more matches not shown; narrow the pattern)')
  })

  it('grep groups path:line: text by file, honours include and limit, and reports a bad regex', async () => {
    const s = setup()
    writeFileSync(join(s.ws, 'src', 'b.ts'), 'const a = 1\n')
    expect((await s.call('grep', { pattern: 'const a', include: '*.js' })).output).toBe('src/app.js:1: const a = 1\n(1 match in 1 file)')
    expect((await s.call('grep', { pattern: 'const', limit: 1 })).output).toMatch(/limit of 1 matches reached/)
    expect((await s.call('grep', { pattern: '(' })).output).toMatch(/invalid regular expression/)
  })
})

describe('the registry', () => {
  it('repairs malformed JSON arguments and unwraps JSON inside a string', () => {
    expect(parseArguments("{path: 'a.txt',}")).toEqual({ ok: true, args: { path: 'a.txt' } })
    expect(parseArguments('"{\\"path\\":\\"a\\"}"')).toEqual({ ok: true, args: { path: 'a' } })
    expect(parseArguments('')).toEqual({ ok: true, args: {} })
    expect(parseArguments('[1,2]')).toMatchObject({ ok: false })
    expect(parseArguments('hello')).toMatchObject({ ok: false })
  })

  it('answers an unknown tool with the valid names, matches case-insensitively, and coerces types', async () => {
    const s = setup()
    const unknown = await s.call('open_file', { path: 'x' })
    expect(unknown).toMatchObject({ status: 'error', malformed: true })
    expect(unknown.output).toMatch(/The tools are: read_file, list_dir, glob, grep, edit_file, write_file, finish, run_command/)
    expect(await s.call(' Read_File ', { path: 'src/app.js', limit: '1' })).toMatchObject({ name: 'read_file', status: 'success', args: { path: 'src/app.js', limit: 1, offset: 1 } })
    const bad = await s.call('read_file', { limit: 3 })
    expect(bad).toMatchObject({ status: 'error', malformed: true })
    expect(bad.output).toMatch(/missing argument 'path'; the arguments of read_file are \{/)
  })

  it('offers run_command only when the shell is allowed', () => {
    expect(ToolRegistry.builtin({ allowShell: false }).names()).not.toContain('run_command')
  })
})

describe('run_command', () => {
  const alive = (pid: number) => {
    try {
      process.kill(pid, 0)
      return true
    } catch {
      return false
    }
  }

  it('returns the exit code and output, with stdin closed and secrets removed from the environment', async () => {
    const s = setup()
    process.env.GITHUB_TOKEN = 'ghp_should_not_leak'
    onTestFinished(() => void delete process.env.GITHUB_TOKEN)
    const out = await s.call('run_command', { command: 'cat; echo "token=${GITHUB_TOKEN:-none} pager=$PAGER"; exit 3' })
    expect(out.status).toBe('success')
    expect(out.output).toBe('$ cat; echo "token=${GITHUB_TOKEN:-none} pager=$PAGER"; exit 3\ntoken=none pager=cat\n[exit code 3]')
  })

  it('keeps the head and the tail of a huge output', async () => {
    const s = setup()
    const out = await s.call('run_command', { command: 'seq 1 200000' })
    expect(out.output.length).toBeLessThan(31_000)
    expect(out.output).toMatch(/\n1\n2\n3\n/)
    expect(out.output).toMatch(/characters omitted/)
    expect(out.output).toMatch(/\n200000\n\[exit code 0\]$/)
  })

  it.each(['timeout', 'abort'])('kills the whole process group on %s', async (how) => {
    const controller = new AbortController()
    const s = setup({ signal: controller.signal })
    const pending = s.call('run_command', { command: 'sleep 300 & echo $! > pids; echo $$ >> pids; sleep 300', ...(how === 'timeout' ? { timeout_seconds: 1 } : {}) })
    const pidsFile = join(s.ws, 'pids')
    for (let i = 0; i < 100 && !(existsSync(pidsFile) && readFileSync(pidsFile, 'utf8').trim().split('\n').length >= 2); i++) await new Promise((r) => setTimeout(r, 50))
    const pids = readFileSync(pidsFile, 'utf8').trim().split('\n').map(Number)
    if (how === 'abort') controller.abort()
    const out = await pending
    expect(out.status).toBe('error')
    expect(out.output).toMatch(how === 'timeout' ? /timed out after 1s/ : /the task is stopping/)
    expect(out.aborted === true).toBe(how === 'abort')
    for (let i = 0; i < 50 && pids.some(alive); i++) await new Promise((r) => setTimeout(r, 50))
    expect(pids.filter(alive)).toEqual([])
  })

  it('does not leave background processes behind after the command exits', async () => {
    const s = setup()
    const out = await s.call('run_command', { command: '(sleep 300 & echo $! > bg.pid) ; echo started' })
    expect(out.output).toContain('started')
    const pid = Number(readFileSync(join(s.ws, 'bg.pid'), 'utf8'))
    for (let i = 0; i < 50 && alive(pid); i++) await new Promise((r) => setTimeout(r, 50))
    expect(alive(pid)).toBe(false)
  })
})
