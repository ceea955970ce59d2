import { describe, expect, it } from 'vitest'
import { ToolError } from '../../src/tools/errors.js'
import { ToolRegistry, parseArguments } from '../../src/tools/registry.js'
import { defineTool, param } from '../../src/tools/schema.js'
import { setup } from './fixture.js'

describe('parseArguments', () => {
  it('parses JSON, repairs malformed JSON and unwraps JSON inside a JSON string', () => {
    expect(parseArguments('{"path":"a.txt"}')).toEqual({ ok: true, args: { path: 'a.txt' } })
    expect(parseArguments("{path: 'a.txt',}")).toEqual({ ok: true, args: { path: 'a.txt' } })
    expect(parseArguments('{"path": "a.txt", "limit": 5,}')).toEqual({ ok: true, args: { path: 'a.txt', limit: 5 } })
    expect(parseArguments('{"path": "a.txt"')).toEqual({ ok: true, args: { path: 'a.txt' } })
    expect(parseArguments('"{\\"path\\":\\"a\\"}"')).toEqual({ ok: true, args: { path: 'a' } })
    expect(parseArguments('')).toEqual({ ok: true, args: {} })
    expect(parseArguments('  \n')).toEqual({ ok: true, args: {} })
  })

  it('refuses what is not an object', () => {
    expect(parseArguments('[1,2]')).toMatchObject({ ok: false, error: 'got an array' })
    expect(parseArguments('42')).toMatchObject({ ok: false })
    expect(parseArguments('hello')).toMatchObject({ ok: false })
    expect(parseArguments('"\\"just text\\""')).toMatchObject({ ok: false })
  })
})

describe('ToolRegistry', () => {
  it('offers the built-in tools, run_command only when the shell is allowed', () => {
    expect(ToolRegistry.builtin({ allowShell: true }).names()).toEqual([
      'read_file',
      'list_dir',
      'glob',
      'grep',
      'edit_file',
      'write_file',
      'inspect',
      'finish',
      'run_command',
    ])
    expect(ToolRegistry.builtin({ allowShell: false }).names()).not.toContain('run_command')
    expect(ToolRegistry.builtin({ allowShell: false, finish: false }).names()).not.toContain('finish')
  })

  it('gives OpenAI specs with a JSON Schema: required fields, defaults, no $schema', () => {
    const spec = ToolRegistry.builtin({ allowShell: true })
      .specs()
      .find((s) => s.function.name === 'read_file')
    expect(spec).toEqual({
      type: 'function',
      function: {
        name: 'read_file',
        description: expect.stringContaining('numbered lines'),
        parameters: {
          type: 'object',
          properties: {
            path: { type: 'string', description: 'path relative to the workspace' },
            offset: { type: 'integer', minimum: 1, default: 1, description: 'first line to show (1-based)' },
            limit: { type: 'integer', minimum: 1, maximum: 2000, default: 2000, description: 'how many lines to show (at most 2000)' },
          },
          required: ['path'],
        },
      },
    })
  })

  it('refuses a second tool of the same name', () => {
    const registry = ToolRegistry.builtin({ allowShell: false })
    const again = defineTool({ name: 'read_file', description: 'x', parameters: {}, run: async () => ({ output: '', status: 'success', error: null }) })
    expect(() => registry.add(again)).toThrow(/two tools are named read_file/)
  })

  it('answers an unknown tool with the valid names, as a malformed call', async () => {
    const s = setup()
    const unknown = await s.call('open_file', "{path: 'x'}")
    expect(unknown).toMatchObject({ status: 'error', malformed: true, name: 'open_file', args: { path: 'x' } })
    expect(unknown.output).toBe(
      "Error: there is no tool named 'open_file'. The tools are: read_file, list_dir, glob, grep, edit_file, write_file, inspect, finish, run_command",
    )
  })

  it('matches names case-insensitively, with white space or a functions. prefix around them', async () => {
    const s = setup()
    for (const name of [' Read_File ', 'READ_FILE', 'functions.read_file']) {
      expect(await s.call(name, { path: 'src/app.js', limit: 1 })).toMatchObject({ name: 'read_file', status: 'success', malformed: false })
    }
  })

  it('runs calls whose arguments are repaired, and records the repaired object', async () => {
    const s = setup()
    const out = await s.call('read_file', "{path: 'src/app.js', limit: '1',}")
    expect(out).toMatchObject({ status: 'success', malformed: false, args: { path: 'src/app.js', limit: 1, offset: 1 } })
    expect(out.output).toBe('1: const a = 1\n(lines 1-1 shown; use offset=2 to read more)')
  })

  it('answers unparseable arguments with the schema, keeping the raw text', async () => {
    const s = setup()
    const out = await s.call('read_file', '[1, 2]')
    expect(out).toMatchObject({ status: 'error', malformed: true, name: 'read_file', args: { _raw: '[1, 2]' } })
    expect(out.output).toMatch(/^Error: the arguments of read_file are not a JSON object \(got an array\); send them as JSON matching \{"type":"object"/)
  })

  it('answers arguments that do not fit the schema with the field, the expected type and the schema', async () => {
    const s = setup()
    const missing = await s.call('read_file', { limit: 3 })
    expect(missing).toMatchObject({ status: 'error', malformed: true, args: { limit: 3 } })
    expect(missing.output).toMatch(/^Error: missing argument 'path' \(string\); the arguments of read_file are \{"type":"object","properties":\{"path"/)
    expect((await s.call('read_file', { path: 7 })).error).toMatch(/^argument 'path' must be a string, not a number;/)
    expect((await s.call('read_file', { path: 'a', limit: 'many' })).error).toMatch(/^argument 'limit' must be an integer, not a string \("many"\);/)
    expect((await s.call('read_file', { path: 'a', limit: 2.5 })).error).toMatch(/^argument 'limit' must be an integer, not a fractional number \(2.5\);/)
    expect((await s.call('read_file', { path: 'a', limit: 0 })).error).toMatch(/^argument 'limit' must be at least 1;/)
    expect((await s.call('finish', { summary: 'x', status: 'maybe' })).error).toMatch(/^argument 'status' must be one of "done", "blocked", not "maybe";/)
  })

  it('coerces what weak models send: numeric strings, "true"/"false", null for an optional field; extra fields dropped', async () => {
    const s = setup()
    const tool = s.tools.resolve('edit_file')
    expect(await tool?.validate({ path: 'a', old_string: 'x', new_string: 'y', replace_all: 'TRUE', extra: 1 })).toEqual({
      ok: true,
      args: { path: 'a', old_string: 'x', new_string: 'y', replace_all: true },
    })
    expect(await tool?.validate({ path: 'a', old_string: 'x', new_string: 'y', replace_all: null })).toEqual({
      ok: true,
      args: { path: 'a', old_string: 'x', new_string: 'y', replace_all: false },
    })
    expect(await s.tools.resolve('grep')?.validate({ pattern: 'p', path: null, limit: ' 7 ' })).toEqual({ ok: true, args: { pattern: 'p', limit: 7 } })
    expect(await tool?.validate('a string')).toMatchObject({ ok: false, error: expect.stringMatching(/^the arguments must be a JSON object, not string;/) })
  })

  it('turns an exception from a tool into an error result', async () => {
    const s = setup()
    const registry = new ToolRegistry()
    const boom = (err: Error) =>
      defineTool({ name: `t${err.name}`, description: 'x', parameters: { n: param.int('n', 1) }, run: async () => Promise.reject(err) })
    registry.add(boom(new ToolError('refused for a reason')))
    const plain = new Error('kaput')
    plain.name = 'Plain'
    registry.add(boom(plain))
    const call = (name: string) => registry.call({ id: '1', type: 'function', function: { name, arguments: '{"n": "2"}' } }, s.ctx)
    expect(await call('tToolError')).toEqual({
      output: 'Error: refused for a reason',
      status: 'error',
      error: 'refused for a reason',
      name: 'tToolError',
      args: { n: 2 },
      malformed: false,
    })
    expect(await call('tPlain')).toMatchObject({ status: 'error', error: 'tPlain failed: kaput', malformed: false })
  })

  it('finish ends the task with its summary and status', async () => {
    const s = setup()
    expect(await s.call('finish', { summary: 'fixed the bug' })).toMatchObject({
      status: 'success',
      output: 'task finished (done)',
      finish: { summary: 'fixed the bug', status: 'done' },
    })
    expect(await s.call('finish', { summary: 'no access', status: 'blocked' })).toMatchObject({ finish: { summary: 'no access', status: 'blocked' } })
  })
})
