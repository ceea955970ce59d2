// An invoice: its lines, an optional discount code, and the totals derived from them.
import { dueDate, parseDate } from './dates.js'
import { assertCents, percentOf, sum, times } from './money.js'
import { computeVat, regionRates } from './tax.js'

let nextLineId = 1

export class Invoice {
  /**
   * @param {object} options
   * @param {string} options.number   invoice number, e.g. INV-2024-0042
   * @param {string} options.region   VAT region (DE, AT, FR, NL, CH)
   * @param {string} options.issued   issue date, YYYY-MM-DD
   * @param {string} [options.terms]  payment terms: net14, net30, eom (default net30)
   * @param {string} [options.customer]
   */
  constructor({ number, region, issued, terms = 'net30', customer = '' }) {
    if (!/^[A-Z]+-\d{4}-\d{4}$/.test(number ?? '')) throw new TypeError(`invoice number must look like INV-2024-0042, got ${number}`)
    this.number = number
    this.region = region
    this.currency = regionRates(region).currency
    this.issued = parseDate(issued)
    this.terms = terms
    this.customer = customer
    this.lines = []
    this.discount = null
  }

  /**
   * Adds a line item. `unitPrice` in cents; `quantity` may be fractional (hours).
   * Returns the line, with its id and total.
   */
  addLine({ description, quantity = 1, unitPrice, category = 'standard', exempt = false }) {
    if (!description || typeof description !== 'string') throw new TypeError('a line needs a description')
    assertCents(unitPrice, 'unit price')
    const line = { id: nextLineId++, description, quantity, unitPrice, category, exempt, total: times(unitPrice, quantity) }
    this.lines.push(line)
    return line
  }

  /** Removes a line by id; returns whether it was there. */
  removeLine(id) {
    const before = this.lines.length
    this.lines = this.lines.filter((line) => line.id !== id)
    return this.lines.length !== before
  }

  /**
   * Applies a discount code: `percent` (e.g. 10 for 10 %) or `amount` in cents.
   * Only one code per invoice; a second one replaces the first.
   */
  applyDiscount({ code, percent, amount }) {
    if (!code) throw new TypeError('a discount needs a code')
    if ((percent === undefined) === (amount === undefined)) throw new TypeError('give a discount either a percent or an amount')
    if (percent !== undefined && (percent <= 0 || percent > 100)) throw new RangeError(`discount percent must be in (0, 100], got ${percent}`)
    if (amount !== undefined) assertCents(amount, 'discount amount')
    this.discount = { code, percent, amount }
  }

  /** The sum of the line totals, before discount and VAT. */
  subtotal() {
    return sum(this.lines.map((line) => line.total))
  }

  /** The discount in cents for a given subtotal: never more than the subtotal. */
  discountAmount(subtotal = this.subtotal()) {
    if (!this.discount) return 0
    const raw = this.discount.percent !== undefined ? percentOf(subtotal, Math.round(this.discount.percent * 100)) : this.discount.amount
    return Math.min(raw, subtotal)
  }

  /**
   * The share of the subtotal still charged after the discount, in basis points:
   * 10 % off leaves 9,000 bp. Used to spread an invoice-level discount over the
   * VAT categories.
   */
  chargedShare(subtotal = this.subtotal(), discount = this.discountAmount(subtotal)) {
    if (subtotal === 0) return 10_000
    return Math.round(((subtotal - discount) * 10_000) / subtotal)
  }

  /**
   * Every figure of the invoice: subtotal, discount, the taxable amount, VAT by
   * category, total and due date.
   */
  totals() {
    const subtotal = this.subtotal()
    const discount = this.discountAmount(subtotal)
    const net = subtotal - discount
    const vat = computeVat(this.lines, this.region)
    return {
      currency: this.currency,
      subtotal,
      discount,
      net,
      vat: vat.parts,
      vatTotal: vat.total,
      total: net + vat.total,
      due: dueDate(this.issued, this.terms),
    }
  }

  /** A plain object for JSON export. */
  toJSON() {
    const totals = this.totals()
    return {
      number: this.number,
      customer: this.customer,
      region: this.region,
      issued: this.issued.toISOString().slice(0, 10),
      due: totals.due.toISOString().slice(0, 10),
      lines: this.lines.map(({ id, ...line }) => line),
      discount: this.discount,
      totals: { ...totals, due: undefined },
    }
  }
}
