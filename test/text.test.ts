import { describe, expect, it } from 'vitest'
import { grouped } from '../src/text.js'

describe('grouped', () => {
  it('writes a number as toLocaleString("en-US") does', () => {
    const samples = [0, 7, 999, 1000, -1000, 12345, 999999, 1000000, -987654321, Number.MAX_SAFE_INTEGER, 1234.5678, -0.5, Number.NaN, Infinity, 1e21]
    for (const n of samples) expect(grouped(n)).toBe(n.toLocaleString('en-US'))
  })
})
