/**
 * JSON string encoding straight to UTF-8 bytes: the bytes of JSON.stringify(text),
 * built in buffers reused from one call to the next. The text is UTF-8-encoded
 * natively, then escaped byte by byte through a table; this is about twice as fast
 * as JSON.stringify followed by the encoding, and the content of a message (most
 * of its bytes) goes through here once for both of the lines it is written to.
 *
 * Byte-equality with JSON.stringify holds because JSON.stringify only escapes
 * '"', '\\' and U+0000–U+001F (all single UTF-8 bytes, which never occur inside a
 * multi-byte sequence) and lone surrogates, which go to JSON.stringify itself.
 */
import { Scratch } from './scratch.js'

/** Per byte: 0 copy as is, a letter for a short escape (\n → 'n'), 0xff for \u00XX. */
const ESCAPE = new Uint8Array(256)
for (let c = 0; c < 0x20; c++) ESCAPE[c] = 0xff
for (const [byte, letter] of [[0x08, 'b'], [0x09, 't'], [0x0a, 'n'], [0x0c, 'f'], [0x0d, 'r'], [0x22, '"'], [0x5c, '\\']] as const) {
  ESCAPE[byte] = letter.charCodeAt(0)
}
const HEX = Buffer.from('0123456789abcdef')
const QUOTE = 0x22
const BACKSLASH = 0x5c

export class JsonStringEncoder {
  private readonly raw = new Scratch()
  private readonly out = new Scratch()

  /** JSON.stringify(text) as UTF-8; valid until the next call. */
  encode(text: string): Buffer {
    // A UTF-16 unit is at most 3 UTF-8 bytes, and its escape at most 6 (\u001f).
    const out = this.out.get(6 * text.length + 2)
    if (!text.isWellFormed()) return out.subarray(0, out.write(JSON.stringify(text), 0))
    const raw = this.raw.get(3 * text.length)
    const length = raw.write(text, 0)
    let at = 0
    out[at++] = QUOTE
    for (let i = 0; i < length; i++) {
      const byte = raw[i] as number
      const escape = ESCAPE[byte] as number
      if (escape === 0) {
        out[at++] = byte
        continue
      }
      out[at++] = BACKSLASH
      if (escape !== 0xff) {
        out[at++] = escape
        continue
      }
      out[at++] = 0x75 // u
      out[at++] = 0x30
      out[at++] = 0x30
      out[at++] = HEX[byte >> 4] as number
      out[at++] = HEX[byte & 15] as number
    }
    out[at++] = QUOTE
    return out.subarray(0, at)
  }

}
