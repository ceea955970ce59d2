import { describe, expect, it } from 'vitest'
import { jsonString } from '../../../src/storage/format/json-string.js'

describe('jsonString', () => {
  it('is JSON.stringify, for short and long texts, asked once or again, equal strings made apart included', () => {
    const texts = ['', 'short "q"', `${'line "a"\\\n\t'.repeat(300)}\u2028\ud800 日本`, `${'b'.repeat(5000)}`]
    for (let round = 0; round < 3; round++) {
      for (const text of texts) expect(jsonString(text)).toBe(JSON.stringify(text))
      // A copy with the same characters (another string object) gets the same answer.
      for (const text of texts) expect(jsonString(text.split('').join(''))).toBe(JSON.stringify(text))
    }
    // More long texts than it remembers: each still right.
    const many = Array.from({ length: 10 }, (_, i) => `${i}:${'z"'.repeat(800)}`)
    for (const text of [...many, ...many]) expect(jsonString(text)).toBe(JSON.stringify(text))
  })
})
