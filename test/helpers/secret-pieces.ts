import { expect } from 'vitest'

/** A secret of each kind: a pattern's key, a token, a whole private key block, a value ctxagent holds (install it). */
export const SECRETS: [string, string][] = [
  ['openai key', 'sk-proj-Q7vLm2Xc9RtB4nKp8WzY3hJd6FgA1sE5uT0o'],
  ['github token', 'ghp_Z9yX8wV7uT6sR5qP4oN3mL2kJ1iH0gF9eD8c'],
  ['private key', `-----BEGIN RSA PRIVATE KEY-----\n${'MIIEpAIBAAKCAQEA7s9Qx2Lw'.repeat(8)}\n-----END RSA PRIVATE KEY-----`],
  ['installed value', 'correct-horse-battery-staple-42-Vq8'],
]

/** Pieces of a secret long enough to matter (8 characters, every 4, past its first 8: the prefixes the rules share). */
export function pieces(secret: string): string[] {
  const out: string[] = []
  for (let i = 8; i + 8 <= secret.length; i += 4) out.push(secret.slice(i, i + 8))
  return out
}

/** No piece of `secret` is in `text`: it was masked whole, or not there. */
export function expectNoPiece(text: string, secret: string): void {
  for (const piece of pieces(secret)) expect(text.includes(piece), `a piece of the secret (${piece}) is left`).toBe(false)
}

/** Text no rule masks, of exactly n characters. */
export const filler = (n: number): string => '. '.repeat(Math.ceil(n / 2)).slice(0, n)
