/**
 * JSON string encoding straight to UTF-8 bytes: the bytes of JSON.stringify(text),
 * built in buffers reused from one call to the next. The text is copied out
 * natively (a plain copy when V8 stores it one byte per character, the common case),
 * then escaped through a table, four plain ASCII bytes at a time. For a 2 KB message
 * that is ~3 µs against ~7 µs for JSON.stringify followed by UTF-8 encoding, and the
 * content of a message (most of its bytes) goes through here once for both of the
 * lines it is written to.
 *
 * Byte-equality with JSON.stringify holds because JSON.stringify only escapes
 * '"', '\\' and U+0000–U+001F (all single UTF-8 bytes, which never occur inside a
 * multi-byte sequence) and lone surrogates, which go to JSON.stringify itself.
 */
import { Scratch } from './scratch.js'

/** A table entry: copy the byte as is. */
const COPY = 0
/** A table entry: write \u00XX. Other non-zero entries are the letter of a short escape (\n → 'n'). */
const UNICODE = 0xff
/** A table entry: a Latin-1 byte ≥ 0x80, written as its two UTF-8 bytes. */
const WIDEN = 0xfe

/** For UTF-8 input: control characters, '"' and '\\' are escaped; everything else is copied. */
const UTF8_TABLE = new Uint8Array(256)
for (let c = 0; c < 0x20; c++) UTF8_TABLE[c] = UNICODE
for (const [byte, letter] of [
  [0x08, 'b'],
  [0x09, 't'],
  [0x0a, 'n'],
  [0x0c, 'f'],
  [0x0d, 'r'],
  [0x22, '"'],
  [0x5c, '\\'],
] as const) {
  UTF8_TABLE[byte] = letter.charCodeAt(0)
}
/** For Latin-1 input: the same, and bytes ≥ 0x80 become two UTF-8 bytes. */
const LATIN1_TABLE = UTF8_TABLE.slice()
LATIN1_TABLE.fill(WIDEN, 0x80)

const HEX = Buffer.from('0123456789abcdef')
const QUOTE = 0x22
const BACKSLASH = 0x5c

/**
 * True when the text has a character above U+00FF. V8 answers at once, without a
 * scan, for a string it stores one byte per character (most code and logs), because
 * no such character can occur in one.
 */
const ABOVE_LATIN1 = /[\u0100-\uffff]/

/** Texts longer than this (characters) are encoded by JSON.stringify: see encode(). */
const LARGE_TEXT = 128 * 1024

/** Each byte of a 32-bit word, for the word-at-a-time tests below. */
const ONES = 0x01010101
const HIGH_BITS = 0x80808080

/**
 * True when none of the four bytes of `word` needs attention: all below 0x80, none
 * below 0x20 (a control character), none '"' or '\\'. The classic SWAR tests
 * ("has a byte less than n", "has a zero byte" after XOR) are exact once every byte
 * is known to be below 0x80, so they may share the one ~word mask.
 */
function plainWord(word: number): boolean {
  const quote = word ^ (QUOTE * ONES)
  const backslash = word ^ (BACKSLASH * ONES)
  return ((((word - 0x20 * ONES) | (quote - ONES) | (backslash - ONES)) & ~word & HIGH_BITS) | (word & HIGH_BITS)) === 0
}

export class JsonStringEncoder {
  private readonly raw = new Scratch()
  private readonly out = new Scratch()
  private readonly rawViews = new ViewCache()
  private readonly outViews = new ViewCache()

  /** JSON.stringify(text) as UTF-8; valid until the next call. */
  encode(text: string): Buffer {
    // The buffers are sized for the worst case, six bytes per character: a huge text
    // takes the plain route instead, which allocates only what the result needs.
    if (text.length > LARGE_TEXT) return Buffer.from(JSON.stringify(text))
    // A UTF-16 unit is at most 3 UTF-8 bytes, and its escape at most 6 (\u001f).
    const out = this.out.get(6 * text.length + 2)
    let raw: Buffer
    let length: number
    let table: Uint8Array
    if (!ABOVE_LATIN1.test(text)) {
      // One byte per character, copied natively (much faster than UTF-8 encoding).
      raw = this.raw.get(text.length)
      length = raw.write(text, 0, 'latin1')
      table = LATIN1_TABLE
    } else {
      if (!text.isWellFormed()) return out.subarray(0, out.write(JSON.stringify(text), 0))
      raw = this.raw.get(3 * text.length)
      length = raw.write(text, 0, 'utf8')
      table = UTF8_TABLE
    }
    const rawView = this.rawViews.of(raw)
    const outView = this.outViews.of(out)
    let at = 0
    out[at++] = QUOTE
    const lastWord = length - 4
    let i = 0
    while (i < length) {
      // Most text is long runs of plain ASCII: four bytes checked and copied at once.
      if (i <= lastWord) {
        const word = rawView.getUint32(i, true)
        if (plainWord(word)) {
          outView.setUint32(at, word, true)
          at += 4
          i += 4
          continue
        }
      }
      const byte = raw[i++] as number
      const entry = table[byte] as number
      if (entry === COPY) {
        out[at++] = byte
      } else if (entry === WIDEN) {
        out[at++] = 0xc0 | (byte >> 6)
        out[at++] = 0x80 | (byte & 0x3f)
      } else if (entry === UNICODE) {
        out[at++] = BACKSLASH
        out[at++] = 0x75 // u
        out[at++] = 0x30
        out[at++] = 0x30
        out[at++] = HEX[byte >> 4] as number
        out[at++] = HEX[byte & 15] as number
      } else {
        out[at++] = BACKSLASH
        out[at++] = entry
      }
    }
    out[at++] = QUOTE
    return out.subarray(0, at)
  }
}

/** A DataView over a buffer's own bytes (a small Buffer may be a slice of a shared pool), kept while the buffer is. */
class ViewCache {
  private buffer: Buffer | null = null
  private view: DataView | null = null

  of(buffer: Buffer): DataView {
    if (buffer !== this.buffer || this.view === null) {
      this.buffer = buffer
      this.view = new DataView(buffer.buffer, buffer.byteOffset, buffer.length)
    }
    return this.view
  }
}
