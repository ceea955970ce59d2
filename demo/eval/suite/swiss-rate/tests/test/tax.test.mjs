import assert from 'node:assert/strict'
import { computeVat, rateFor } from '../src/tax.js'

const line = (total, extra = {}) => ({ total, category: 'standard', exempt: false, ...extra })

test('rates by region and category', () => {
  assert.equal(rateFor('DE'), 1900)
  assert.equal(rateFor('DE', 'reduced'), 700)
  assert.equal(rateFor('CH'), 770)
  assert.throws(() => rateFor('XX'), /unknown region XX; known: DE, AT, FR, NL, CH/)
  assert.throws(() => rateFor('DE', 'luxury'), /unknown VAT category/)
})

test('VAT is computed per category on the taxable total', () => {
  const vat = computeVat([line(10_000), line(5_000), line(2_000, { category: 'reduced' })], 'DE')
  assert.deepEqual(vat.parts, [
    { category: 'standard', rate: 1900, taxable: 15_000, vat: 2_850 },
    { category: 'reduced', rate: 700, taxable: 2_000, vat: 140 },
  ])
  assert.equal(vat.total, 2_990)
})

test('exempt lines are not taxed', () => {
  assert.equal(computeVat([line(10_000, { exempt: true }), line(1_000)], 'AT').total, 200)
})

test('a scale below 10,000 bp taxes only the charged share', () => {
  assert.equal(computeVat([line(20_000)], 'DE', 9_000).total, 3_420)
})
