import { afterEach, describe, expect, it } from 'vitest'
import { MASK_BATCH, MaskingStream, maskedHead, maskOverlap } from '../../../src/storage/format/mask-stream.js'
import { installSecrets, maskText } from '../../../src/storage/format/mask.js'
import { expectNoPiece, filler, SECRETS } from '../../helpers/secret-pieces.js'

/** What a stream emits for `text` pushed in these pieces. */
function streamed(text: string, sizes: (i: number) => number): string {
  let out = ''
  const stream = new MaskingStream((m) => (out += m))
  for (let at = 0, i = 0; at < text.length; i++) {
    const n = sizes(i)
    stream.push(text.slice(at, at + n))
    at += n
  }
  stream.end()
  return out
}

describe('masking a stream in pieces', () => {
  afterEach(() => installSecrets([]))

  for (const [kind, secret] of SECRETS) {
    it(`${kind}: at every offset across the first piece's end, masked whole`, () => {
      installSecrets([{ name: 'test.secret', value: SECRETS[3]?.[1] as string }])
      // The first pass takes overlap + batch characters and ends its piece at `batch`: the secret starts k before it.
      const first = maskOverlap() + MASK_BATCH
      for (let k = 0; k <= secret.length; k++) {
        const text = `${filler(MASK_BATCH - k)} ${secret} ${filler(first + 1000)}`
        const out = streamed(text, (i) => (i === 0 ? first : 4096))
        expectNoPiece(out, secret)
        expect(out).toBe(maskText(text))
      }
    })
  }

  it('pieces of every size, secrets everywhere: the same as masking the whole', () => {
    installSecrets([{ name: 'test.secret', value: SECRETS[3]?.[1] as string }])
    let text = ''
    for (let i = 0; text.length < 400_000; i++)
      text += `${filler(997 * (i % 7) + 13)} ${(SECRETS[i % SECRETS.length] as [string, string])[1]} mail ann${i}@example.com `
    for (const size of [1, 7, 1000, 4096, 65_536, 100_003]) expect(streamed(text, () => size)).toBe(maskText(text))
  })

  it('an endless run of key characters still moves on, masked from its start', () => {
    const text = `x sk-${'a'.repeat(300_000)} y`
    const out = streamed(text, () => 10_000)
    expect(out.startsWith('x [OPENAI_KEY]')).toBe(true)
    expect(out.length).toBeLessThan(text.length)
  })
})

describe('the head of a long text', () => {
  it('a secret across the cut is masked whole before the cut', () => {
    for (const [, secret] of SECRETS.slice(0, 3)) {
      for (let k = 0; k <= secret.length; k++) {
        const line = `${filler(1000 - k)} ${secret} ${filler(1200)}`
        const head = maskedHead(line, 1000)
        expect(head.length).toBeLessThanOrEqual(1000)
        expectNoPiece(head, secret)
      }
    }
  })
})
