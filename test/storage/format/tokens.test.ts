import { describe, expect, it } from 'vitest'
import { estimateMessageTokens, estimateTokens } from '../../../src/storage/format/tokens.js'

describe('estimateTokens', () => {
  it('counts four characters per token for Latin text', () => {
    expect(estimateTokens('')).toBe(0)
    expect(estimateTokens('abcd')).toBe(1)
    expect(estimateTokens('abcde')).toBe(2)
    expect(estimateTokens('x'.repeat(400))).toBe(100)
  })

  it('counts two characters per token when at least half is Japanese', () => {
    expect(estimateTokens('こんにちは世界')).toBe(4) // 7 chars / 2
    expect(estimateTokens('バグを修正しました: fix')).toBe(Math.ceil(14 / 2))
  })

  it('stays at four per token when Japanese is under half', () => {
    const text = `${'a'.repeat(60)}${'日'.repeat(40)}`
    expect(estimateTokens(text)).toBe(25)
  })

  it('includes tool calls in a message estimate', () => {
    const calls = [{ id: 'c1', type: 'function', function: { name: 'read', arguments: '{"path":"a"}' } }]
    expect(estimateMessageTokens({ content: 'abcd', tool_calls: calls })).toBe(1 + estimateTokens(JSON.stringify(calls)))
  })
})
