// VAT by region. Rates are in basis points so that 7.7 % (CH) stays exact.
import { percentOf, sum } from './money.js'

export const RATES = {
  DE: { standard: 1900, reduced: 700, currency: 'EUR' },
  AT: { standard: 2000, reduced: 1000, currency: 'EUR' },
  FR: { standard: 2000, reduced: 550, currency: 'EUR' },
  NL: { standard: 2100, reduced: 900, currency: 'EUR' },
  CH: { standard: 770, reduced: 250, currency: 'CHF' },
}

/** The rate table of a region, or an error naming the known ones. */
export function regionRates(region) {
  const rates = RATES[region]
  if (!rates) {
    throw new RangeError(`unknown region ${region}; known: ${Object.keys(RATES).join(', ')}`)
  }
  return rates
}

/** The rate in basis points for a line's category in a region. */
export function rateFor(region, category = 'standard') {
  const rates = regionRates(region)
  if (!(category in rates) || category === 'currency') {
    throw new RangeError(`unknown VAT category ${category}; use standard or reduced`)
  }
  return rates[category]
}

/**
 * The taxable amount per category: line totals of lines that are not exempt,
 * grouped by their VAT category.
 */
export function taxableByCategory(lines) {
  const groups = new Map()
  for (const line of lines) {
    if (line.exempt) continue
    const category = line.category ?? 'standard'
    groups.set(category, (groups.get(category) ?? 0) + line.total)
  }
  return groups
}

/**
 * VAT of an invoice: each category's taxable amount times its rate, rounded once
 * per category (see docs/rounding.md). `scale` spreads an invoice-level discount over
 * the categories: the share of the subtotal that is still charged, in basis points.
 */
export function computeVat(lines, region, scale = 10_000) {
  const parts = []
  for (const [category, taxable] of taxableByCategory(lines)) {
    const charged = percentOf(taxable, scale)
    parts.push({ category, rate: rateFor(region, category), taxable: charged, vat: percentOf(charged, rateFor(region, category)) })
  }
  return { parts, total: sum(parts.map((p) => p.vat)) }
}
