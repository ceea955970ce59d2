import assert from 'node:assert/strict'
import { computeVat, rateFor } from '../src/tax.js'

test('Swiss invoices charge the standard rate of 7.7 %', () => {
  assert.equal(rateFor('CH'), 770)
  assert.equal(computeVat([{ total: 100_000, category: 'standard', exempt: false }], 'CH').total, 7_700)
})
