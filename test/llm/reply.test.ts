import { describe, expect, it } from 'vitest'
import { normaliseReply, TOO_DEEP_ARGUMENTS } from '../../src/llm/reply.js'
import { parseArguments } from '../../src/tools/registry.js'

describe('normaliseReply', () => {
  it('makes every shape a server sends a message ctxagent can record and answer', () => {
    expect(normaliseReply(null)).toEqual({ role: 'assistant', content: null })
    expect(normaliseReply({ content: [{ type: 'text', text: 'a' }, { type: 'image_url' }, 'b'] })).toEqual({ role: 'assistant', content: 'a\nb' })
    expect(normaliseReply({ content: 42 })).toEqual({ role: 'assistant', content: null })
    const m = normaliseReply({
      content: 'x',
      tool_calls: [
        { function: { name: null, arguments: { path: 'a' } } },
        'junk',
        { type: 'custom', custom: {} },
        { id: 'k', type: 'function', function: { name: 'glob' } },
      ],
    })
    expect(m.tool_calls).toHaveLength(2)
    expect(m.tool_calls?.[0]).toMatchObject({ type: 'function', function: { name: '', arguments: '{"path":"a"}' } })
    expect(m.tool_calls?.[0]?.id).toMatch(/^call_[0-9a-f]{24}$/)
    expect(m.tool_calls?.[1]).toEqual({ id: 'k', type: 'function', function: { name: 'glob', arguments: '' } })
  })

  it('turns arguments too deep to serialise into a malformed call, without recursing', () => {
    const deep = JSON.parse(`${'['.repeat(50_000)}${']'.repeat(50_000)}`) as unknown
    const m = normaliseReply({ tool_calls: [{ id: 'd', function: { name: 'glob', arguments: deep } }] })
    expect(m.tool_calls?.[0]?.function.arguments).toBe(TOO_DEEP_ARGUMENTS)
    expect(parseArguments(TOO_DEEP_ARGUMENTS)).toEqual({ ok: false, error: 'nested deeper than 100 levels' })
  })
})

describe('parseArguments', () => {
  it('takes an object as it is, refuses arrays, other values and deep nesting', () => {
    expect(parseArguments({ path: 'a' })).toEqual({ ok: true, args: { path: 'a' } })
    expect(parseArguments(undefined)).toEqual({ ok: true, args: {} })
    expect(parseArguments([1])).toEqual({ ok: false, error: 'got an array' })
    expect(parseArguments(7)).toEqual({ ok: false, error: 'got number' })
    expect(parseArguments(`${'{"a":'.repeat(101)}1${'}'.repeat(101)}`)).toEqual({ ok: false, error: 'nested deeper than 100 levels' })
    expect(parseArguments(`${'{"a":'.repeat(100)}1${'}'.repeat(100)}`).ok).toBe(true)
    // Brackets inside strings are not nesting.
    expect(parseArguments(JSON.stringify({ text: '['.repeat(500) }))).toEqual({ ok: true, args: { text: '['.repeat(500) } })
  })
})
