import assert from 'node:assert/strict'
import { Invoice } from '../src/index.js'

test('render shows lines, totals and due date', () => {
  const invoice = new Invoice({ number: 'INV-2024-0007', region: 'AT', issued: '2024-05-02', terms: 'net14' })
  invoice.addLine({ description: 'Workshop', quantity: 1, unitPrice: 80_000 })
  const text = invoice.render()
  assert.match(text, /^Invoice INV-2024-0007\nIssued: 2024-05-02    Due: 2024-05-16 \(net14\)/)
  assert.match(text, /Workshop  1 × 800\.00 € +800\.00 €/)
  assert.match(text, /VAT 20 % on 800\.00 € +160\.00 €/)
  assert.match(text, /Total +960\.00 €$/)
})
