import { describe, expect, it } from 'vitest'
import { cut } from '../../src/workspace/instructions.js'

// The bound on a project instructions file (docs/environments.md#project-instructions): bytes, not characters.

describe('cut', () => {
  it('keeps a text within the bound as it is', () => {
    expect(cut('a\nb\n', 4)).toBe('a\nb\n')
  })

  it("cuts at the last line's end when one is in the bound's second half", () => {
    expect(cut('aaaa\nbbbb\ncccc\n', 12)).toBe('aaaa\nbbbb\n')
  })

  it('never splits a character: a cut inside a multi-byte one drops it whole', () => {
    const text = 'ééééé' // 10 bytes
    const head = cut(text, 5)
    expect(head).toBe('éé')
    expect(Buffer.byteLength(head)).toBeLessThanOrEqual(5)
  })
})
