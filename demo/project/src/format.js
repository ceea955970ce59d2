// Plain-text rendering of an invoice, for e-mails and terminals.
import { formatAmount } from './money.js'

const WIDTH = 64

function row(label, value) {
  const gap = Math.max(1, WIDTH - label.length - value.length)
  return `${label}${' '.repeat(gap)}${value}`
}

function rate(basisPoints) {
  return `${(basisPoints / 100).toFixed(basisPoints % 100 === 0 ? 0 : 1)} %`
}

/** The lines block: description, quantity × unit price, line total. */
export function renderLines(invoice) {
  const money = (cents) => formatAmount(cents, invoice.currency)
  return invoice.lines.map((line) => {
    const qty = Number.isInteger(line.quantity) ? String(line.quantity) : line.quantity.toFixed(2)
    const label = `${line.description}${line.exempt ? ' (VAT exempt)' : ''}  ${qty} × ${money(line.unitPrice)}`
    return row(label.length > WIDTH - 14 ? `${label.slice(0, WIDTH - 15)}…` : label, money(line.total))
  })
}

/** The totals block: subtotal, discount, VAT per category, total. */
export function renderTotals(invoice) {
  const t = invoice.totals()
  const money = (cents) => formatAmount(cents, t.currency)
  const out = [row('Subtotal', money(t.subtotal))]
  if (t.discount > 0) out.push(row(`Discount ${invoice.discount.code}`, money(-t.discount)))
  for (const part of t.vat) out.push(row(`VAT ${rate(part.rate)} on ${money(part.taxable)}`, money(part.vat)))
  out.push('-'.repeat(WIDTH), row('Total', money(t.total)))
  return out
}

/** The whole invoice as text. */
export function renderInvoice(invoice) {
  const t = invoice.totals()
  return [
    `Invoice ${invoice.number}`,
    invoice.customer ? `Customer: ${invoice.customer}` : null,
    `Issued: ${invoice.issued.toISOString().slice(0, 10)}    Due: ${t.due.toISOString().slice(0, 10)} (${invoice.terms})`,
    '',
    ...renderLines(invoice),
    '',
    ...renderTotals(invoice),
  ]
    .filter((line) => line !== null)
    .join('\n')
}
