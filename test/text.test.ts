import { describe, expect, it } from 'vitest'
import { byCodeUnits, grouped, wrapWords } from '../src/text.js'

describe('grouped', () => {
  it('writes a number as toLocaleString("en-US") does', () => {
    const samples = [0, 7, 999, 1000, -1000, 12345, 999999, 1000000, -987654321, Number.MAX_SAFE_INTEGER, 1234.5678, -0.5, Number.NaN, Infinity, 1e21]
    for (const n of samples) expect(grouped(n)).toBe(n.toLocaleString('en-US'))
  })
})

describe('wrapWords', () => {
  it('wraps at spaces within the width, indents what follows, and never cuts a word', () => {
    const text =
      'warn sandbox: commands run as nobody (65534) with a seccomp filter; /root/.npm/_npx/a-very-long-directory-name-that-cannot-fit is not readable'
    const wrapped = wrapWords(text, 40, 5)
    const lines = wrapped.split('\n')
    expect(lines.join(' ').replace(/ +/g, ' ')).toBe(text)
    for (const l of lines) if (!l.includes('/root/')) expect(l.length).toBeLessThanOrEqual(40)
    for (const l of lines.slice(1)) expect(l.startsWith('     ') && !l.startsWith('      ')).toBe(true)
    expect(lines.some((l) => l.trim() === '/root/.npm/_npx/a-very-long-directory-name-that-cannot-fit')).toBe(true)
    expect(wrapWords('short', 40, 5)).toBe('short')
  })
})

describe('byCodeUnits', () => {
  it('orders as < does: ISO times by time, and upper case before lower, unlike a locale', () => {
    const times = ['2026-12-07T05:00:00.000Z', '2026-01-31T23:59:59.999Z', '2026-12-07T04:59:59.999Z']
    expect([...times].sort(byCodeUnits)).toEqual([times[1], times[2], times[0]])
    expect(['b', 'a', 'B', 'a'].sort(byCodeUnits)).toEqual(['B', 'a', 'a', 'b'])
    expect(byCodeUnits('x', 'x')).toBe(0)
  })
})
