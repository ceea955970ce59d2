import assert from 'node:assert/strict'
import { Invoice } from '../src/index.js'

test('VAT is charged on the discounted amount', () => {
  const invoice = new Invoice({ number: 'INV-2024-0001', region: 'DE', issued: '2024-03-01', customer: 'Acme GmbH' })
  invoice.addLine({ description: 'Consulting', quantity: 2, unitPrice: 10_000 })
  invoice.applyDiscount({ code: 'SPRING10', percent: 10 })
  const t = invoice.totals()
  assert.equal(t.discount, 2_000)
  assert.equal(t.vatTotal, 3_420)
  assert.equal(t.total, 21_420)
})
