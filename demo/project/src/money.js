// Cents arithmetic. Every amount in invoice-kit is an integer number of cents; the
// helpers here are the only places that round, parse or format.

/** Throws unless `value` is a safe integer number of cents. */
export function assertCents(value, what = 'amount') {
  if (!Number.isSafeInteger(value)) {
    throw new TypeError(`${what} must be a whole number of cents, got ${value}`)
  }
  return value
}

/**
 * Rounds a fractional number of cents half-up (away from zero for .5), the way
 * accountants expect: 0.5 → 1, -0.5 → -1, 2.4999 → 2.
 */
export function roundHalfUp(cents) {
  const sign = cents < 0 ? -1 : 1
  const abs = Math.abs(cents)
  // Guard against binary noise such as 379.49999999999994 for 379.5.
  const nudged = Math.round(abs * 1e6) / 1e6
  return sign * Math.floor(nudged + 0.5)
}

/**
 * A percentage of an amount, given in basis points (1 % = 100 bp), rounded once.
 * percentOf(1999, 1900) === 380
 */
export function percentOf(cents, basisPoints) {
  assertCents(cents)
  assertCents(basisPoints, 'basis points')
  return roundHalfUp((cents * basisPoints) / 10_000)
}

/** Sums amounts, checking each one. */
export function sum(amounts) {
  let total = 0
  for (const amount of amounts) total += assertCents(amount)
  return total
}

/** Multiplies a unit price by a quantity that may be fractional (hours, kilograms). */
export function times(unitPrice, quantity) {
  assertCents(unitPrice, 'unit price')
  if (typeof quantity !== 'number' || !Number.isFinite(quantity) || quantity < 0) {
    throw new TypeError(`quantity must be a number of 0 or more, got ${quantity}`)
  }
  return roundHalfUp(unitPrice * quantity)
}

/** Parses "12.50", "12,50", "1 234.5" or "-3" into cents. */
export function parseAmount(text) {
  const cleaned = String(text).trim().replace(/[\s_]/g, '').replace(',', '.')
  if (!/^-?\d+(\.\d{1,2})?$/.test(cleaned)) {
    throw new SyntaxError(`not an amount: ${JSON.stringify(text)}`)
  }
  const [whole, fraction = ''] = cleaned.replace('-', '').split('.')
  const cents = Number(whole) * 100 + Number(fraction.padEnd(2, '0'))
  return cleaned.startsWith('-') ? -cents : cents
}

const SYMBOLS = { EUR: '€', CHF: 'CHF ', USD: '$', GBP: '£' }

/** Formats cents as "1,234.50 €" (symbol after for EUR, before for the others). */
export function formatAmount(cents, currency = 'EUR') {
  assertCents(cents)
  const sign = cents < 0 ? '-' : ''
  const abs = Math.abs(cents)
  const whole = Math.floor(abs / 100)
    .toString()
    .replace(/\B(?=(\d{3})+(?!\d))/g, ',')
  const fraction = String(abs % 100).padStart(2, '0')
  const symbol = SYMBOLS[currency] ?? `${currency} `
  return currency === 'EUR' ? `${sign}${whole}.${fraction} ${symbol}` : `${sign}${symbol}${whole}.${fraction}`
}
