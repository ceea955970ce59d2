import assert from 'node:assert/strict'
import { formatAmount, parseAmount, percentOf, roundHalfUp, times } from '../src/money.js'

test('roundHalfUp rounds .5 away from zero', () => {
  assert.equal(roundHalfUp(0.5), 1)
  assert.equal(roundHalfUp(-0.5), -1)
  assert.equal(roundHalfUp(2.4999), 2)
  assert.equal(roundHalfUp(379.49999999999994), 380)
})

test('percentOf takes basis points and rounds once', () => {
  assert.equal(percentOf(1999, 1900), 380)
  assert.equal(percentOf(10_000, 770), 770)
  assert.equal(percentOf(0, 1900), 0)
})

test('times multiplies by fractional quantities', () => {
  assert.equal(times(12_000, 1.5), 18_000)
  assert.equal(times(333, 3), 999)
  assert.throws(() => times(100, -1), /quantity/)
})

test('parseAmount reads dots, commas and spaces', () => {
  assert.equal(parseAmount('12.50'), 1250)
  assert.equal(parseAmount('12,5'), 1250)
  assert.equal(parseAmount('1 234.05'), 123405)
  assert.equal(parseAmount('-3'), -300)
  assert.throws(() => parseAmount('12.345'), /not an amount/)
})

test('formatAmount groups thousands and places the symbol', () => {
  assert.equal(formatAmount(123450), '1,234.50 €')
  assert.equal(formatAmount(-5), '-0.05 €')
  assert.equal(formatAmount(9900, 'CHF'), 'CHF 99.00')
})
