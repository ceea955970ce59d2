import assert from 'node:assert/strict'
import { Invoice } from '../src/index.js'

const make = () => new Invoice({ number: 'INV-2024-0042', region: 'DE', issued: '2024-03-01', customer: 'Acme GmbH' })

test('totals of an invoice without discount', () => {
  const invoice = make()
  invoice.addLine({ description: 'Consulting', quantity: 2, unitPrice: 10_000 })
  invoice.addLine({ description: 'Travel', unitPrice: 4_550, category: 'reduced' })
  const t = invoice.totals()
  assert.equal(t.subtotal, 24_550)
  assert.equal(t.discount, 0)
  assert.equal(t.vatTotal, 3_800 + 319)
  assert.equal(t.total, 24_550 + 4_119)
})

test('a percentage discount is taken off the subtotal', () => {
  const invoice = make()
  invoice.addLine({ description: 'Consulting', quantity: 2, unitPrice: 10_000 })
  invoice.applyDiscount({ code: 'SPRING10', percent: 10 })
  const t = invoice.totals()
  assert.equal(t.discount, 2_000)
  assert.equal(t.net, 18_000)
})

test('a fixed discount is never more than the subtotal', () => {
  const invoice = make()
  invoice.addLine({ description: 'Sticker', unitPrice: 300 })
  invoice.applyDiscount({ code: 'WELCOME', amount: 500 })
  assert.equal(invoice.totals().discount, 300)
})

test('lines are validated', () => {
  const invoice = make()
  assert.throws(() => invoice.addLine({ description: '', unitPrice: 100 }), /needs a description/)
  assert.throws(() => invoice.addLine({ description: 'x', unitPrice: 1.5 }), /whole number of cents/)
  assert.throws(() => invoice.applyDiscount({ code: 'X', percent: 10, amount: 100 }), /either a percent or an amount/)
})

test('the due date follows the terms', () => {
  assert.equal(make().totals().due.toISOString().slice(0, 10), '2024-03-31')
})
