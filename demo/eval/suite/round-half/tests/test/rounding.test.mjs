import assert from 'node:assert/strict'
import { percentOf, roundHalfUp, times } from '../src/money.js'

test('amounts round half up, once', () => {
  assert.equal(roundHalfUp(379.5), 380)
  assert.equal(roundHalfUp(2.4999), 2)
  assert.equal(roundHalfUp(-0.5), -1)
  assert.equal(percentOf(1999, 1900), 380)
  assert.equal(times(333, 1.5), 500)
})
