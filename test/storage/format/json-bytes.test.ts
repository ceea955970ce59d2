import { describe, expect, it } from 'vitest'
import { JsonStringEncoder } from '../../../src/storage/format/json-bytes.js'
import { Scratch } from '../../../src/storage/format/scratch.js'

// Every kind of character the encoder treats differently, mixed at random. LATIN1
// keeps to U+0000–U+00FF, the strings V8 stores one byte per character (another path).
const LATIN1 = [
  'a',
  'abcd',
  'const x = 1;',
  '\n',
  '\r\n',
  '\t',
  '"',
  '\\',
  '\\n',
  'ÄÖÜ',
  'résumé',
  '\u0080',
  '\u0085',
  '\u00a0',
  '\u00ff',
  '\u007f',
  '\u0000',
  '\u0008',
  '\u000c',
  '\u001b',
  '\u001f',
  '/',
  '',
]
const PIECES = [
  'a',
  'const x = 1;',
  '\n',
  '\r\n',
  '\t',
  '"',
  '\\',
  '\\n',
  'ÄÖÜ',
  'résumé',
  '日本語',
  '😀',
  '\u2028',
  '\u007f',
  '\u0000',
  '\u0008',
  '\u000c',
  '\u001b',
  '\u001f',
  '\ud800',
  '\udfff',
  '/',
  '',
]

function randomText(seed: number, pieces = PIECES): string {
  let s = seed
  const next = () => (s = (s * 1664525 + 1013904223) >>> 0) / 2 ** 32
  const parts: string[] = []
  for (let n = Math.floor(next() * 40); n > 0; n--) parts.push(pieces[Math.floor(next() * pieces.length)] as string)
  return parts.join('')
}

const json = (text: string) => Buffer.from(JSON.stringify(text))

describe('JsonStringEncoder', () => {
  it('gives the bytes of JSON.stringify on ordinary and odd texts', () => {
    const encoder = new JsonStringEncoder()
    for (const text of ['', 'plain', 'line\nline', 'say "hi"', 'C:\\path', 'tab\there', 'bell\u0007', 'lone \ud83d surrogate', '😀 pair', '日本語のテキスト']) {
      expect(encoder.encode(text).toString()).toBe(json(text).toString())
    }
  })

  it('gives the bytes of JSON.stringify on 5,000 random mixes of escapes, controls and surrogates', () => {
    const encoder = new JsonStringEncoder()
    for (let seed = 1; seed <= 5000; seed++) {
      const text = randomText(seed)
      expect(encoder.encode(text).equals(json(text)), JSON.stringify(text)).toBe(true)
    }
  })

  it('gives the bytes of JSON.stringify on 5,000 random Latin-1 texts, whatever their alignment', () => {
    const encoder = new JsonStringEncoder()
    for (let seed = 1; seed <= 5000; seed++) {
      const text = randomText(seed, LATIN1)
      expect(encoder.encode(text).equals(json(text)), JSON.stringify(text)).toBe(true)
    }
  })

  it('encodes texts larger than the buffers it keeps', () => {
    const encoder = new JsonStringEncoder()
    for (const big of ['x"\n\u0001'.repeat(300_000), 'ab'.repeat(40_000), 'é\n'.repeat(60_000)]) {
      expect(encoder.encode(big).equals(json(big))).toBe(true)
    }
    expect(encoder.encode('small').toString()).toBe('"small"')
  })
})

describe('Scratch', () => {
  it('reuses its buffer up to the limit and hands out one-off buffers above it', () => {
    const scratch = new Scratch(1024)
    const first = scratch.get(100)
    expect(scratch.get(50)).toBe(first)
    const grown = scratch.get(600)
    expect(grown.length).toBeGreaterThanOrEqual(600)
    expect(scratch.get(600)).toBe(grown)
    const huge = scratch.get(5000)
    expect(huge.length).toBeGreaterThanOrEqual(5000)
    expect(scratch.get(5000)).not.toBe(huge)
    expect(scratch.get(600)).toBe(grown)
  })
})
