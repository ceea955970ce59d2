import { readFileSync } from 'node:fs'
import { describe, expect, it } from 'vitest'
import { parse } from 'yaml'
import { CONFIG_SECTIONS, configSchemaOf } from '../../src/config/schema.js'
import { configDefaults, validateConfig } from '../../src/config/validate.js'

/*
 * validateConfig builds only the sections a file sets (docs/development.md#start-up); what it
 * returns must be what the whole schema returns, value, key order and messages alike.
 */

const whole = (data: unknown) => configSchemaOf().safeParse(data, { reportInput: true })
/** The result as text: equal text is equal values in the same key order. */
const asText = (result: { success: boolean; data?: unknown; error?: { issues: unknown[] } }) =>
  JSON.stringify(result.success ? result.data : result.error?.issues)

const example = parse(readFileSync(new URL('../../config.example.yaml', import.meta.url), 'utf8')) as unknown

const files: [string, unknown][] = [
  ['nothing', {}],
  ['one section', { llm: { provider: 'openai', openai: { base_url: 'http://127.0.0.1:9/v1', api_key: 'k', model: 'm', max_retries: 0 } } }],
  ['sections out of order', { tools: { shell: true }, context: { compression: { keep_recent: 4 } }, users: { ann: { run: { max_turns: 3 } } } }],
  ['records', { pricing: { m: { prompt: 1, completion: 2 } }, mcp: { servers: { fs: { command: 'npx', args: ['-y', 'x'] } } } }],
  ['every section', example],
  ['a bad value', { llm: { openai: { context_length: -5 } } }],
  ['a null section', { llm: null }],
  ['a misspelt key', { llm: { openai: { modle: 'x' } } }],
  ['an unknown section', { lmm: { provider: 'openai' } }],
  ['a bad value beside an unknown section', { llm: { provider: 'nope' }, extra: 1 }],
  ['not a mapping', ['llm']],
  ['a scalar', 'llm'],
]

describe('validateConfig', () => {
  it.each(files)('returns what the whole schema returns: %s', (_name, data) => {
    const got = validateConfig(data)
    const want = whole(data)
    expect(got.success).toBe(want.success)
    expect(asText(got)).toBe(asText(want))
  })

  it('gives each call its own defaults (a caller changes its config)', () => {
    const first = validateConfig({})
    if (!first.success) throw new Error('{} must parse')
    first.data.llm.openai.api_key = 'changed'
    first.data.users.someone = {}
    const second = configDefaults()
    expect(second.llm.openai.api_key).toBeNull()
    expect(second.users).toEqual({})
    expect(Object.keys(second)).toEqual(CONFIG_SECTIONS)
  })
})
