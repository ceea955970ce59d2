// Writes demo/session.jsonl, the recorded coding session that `ctxagent demo` replays
// against demo/project: the task, then the assistant's turns (its tool calls). The tool
// results are not recorded: the replay runs the tools for real. Run it after changing
// the project or the turns: node scripts/demo-session.mjs
import { writeFileSync } from 'node:fs'
import { fileURLToPath } from 'node:url'

const TASK = `Bug report from a customer (invoice-kit 1.4.2):

> When I apply a discount code, the VAT on my invoice is too high. Example: one line
> "Consulting", 2 × 100.00 €, region DE, discount code SPRING10 (10 %). The invoice shows
> Subtotal 200.00 €, Discount -20.00 €, "VAT 19 % on 200.00 €" 38.00 €, Total 218.00 €.
> VAT should be charged on the discounted amount: 19 % of 180.00 € = 34.20 €, total 214.20 €.

Please find the cause and fix it, add a regression test, note the fix in the CHANGELOG,
and make sure all tests pass (node test/run.mjs).`

const REPRO = `import { Invoice } from './src/index.js'

// The customer's example: 2 × 100.00 € in DE with a 10 % discount code.
const invoice = new Invoice({ number: 'INV-2024-0042', region: 'DE', issued: '2024-03-01', customer: 'Acme GmbH' })
invoice.addLine({ description: 'Consulting', quantity: 2, unitPrice: 10_000 })
invoice.applyDiscount({ code: 'SPRING10', percent: 10 })
console.log(invoice.render())
const t = invoice.totals()
console.log(JSON.stringify({ net: t.net, vat: t.vatTotal, total: t.total }))
`

const REPRO_MIXED = `import { Invoice } from './src/index.js'

// Mixed categories, an exempt line and a fixed discount: VAT must follow the discount
// in proportion, per category, and leave the exempt line out.
const invoice = new Invoice({ number: 'INV-2024-0043', region: 'DE', issued: '2024-03-01' })
invoice.addLine({ description: 'Consulting', quantity: 3, unitPrice: 12_000 })
invoice.addLine({ description: 'Books', quantity: 2, unitPrice: 2_450, category: 'reduced' })
invoice.addLine({ description: 'Insurance', unitPrice: 5_000, exempt: true })
invoice.applyDiscount({ code: 'LOYAL', amount: 4_590 })
console.log(invoice.render())
const t = invoice.totals()
console.log(JSON.stringify({ subtotal: t.subtotal, discount: t.discount, vat: t.vat, total: t.total }))
`

const BUGGY = 'const vat = computeVat(this.lines, this.region)'
const FIXED = `// VAT is charged on what the customer pays: the discount lowers the taxable amount
    // of every category in proportion (see README, "How totals are computed").
    const vat = computeVat(this.lines, this.region, this.chargedShare(subtotal, discount))`

const REGRESSION = `test('a discount lowers the VAT: it is charged on the discounted amount', () => {
  const invoice = make()
  invoice.addLine({ description: 'Consulting', quantity: 2, unitPrice: 10_000 })
  invoice.applyDiscount({ code: 'SPRING10', percent: 10 })
  const t = invoice.totals()
  assert.equal(t.net, 18_000)
  assert.deepEqual(t.vat, [{ category: 'standard', rate: 1900, taxable: 18_000, vat: 3_420 }])
  assert.equal(t.total, 21_420)
})

test('a fixed discount is spread over the VAT categories in proportion', () => {
  const invoice = make()
  invoice.addLine({ description: 'Consulting', quantity: 3, unitPrice: 12_000 })
  invoice.addLine({ description: 'Books', quantity: 2, unitPrice: 2_450, category: 'reduced' })
  invoice.addLine({ description: 'Insurance', unitPrice: 5_000, exempt: true })
  invoice.applyDiscount({ code: 'LOYAL', amount: 4_590 })
  const t = invoice.totals()
  assert.deepEqual(t.vat.map((p) => p.taxable), [32_400, 4_410])
  assert.equal(t.vatTotal, 6_156 + 309)
})

test('a fixed discount is never more than the subtotal', () => {`

const turns = [
  ['I will start with an overview of the project and how totals are meant to be computed.', [['list_dir', {}]]],
  ['', [['read_file', { path: 'README.md' }]]],
  ['The README says VAT applies to the discounted subtotal. Let me see the code that computes totals.', [['glob', { pattern: 'src/**/*.js' }]]],
  ['', [['read_file', { path: 'src/invoice.js' }]]],
  ['totals() computes the discount, then VAT. Let me look at computeVat in tax.js.', [['read_file', { path: 'src/tax.js' }]]],
  ['First I will check whether the tests pass today.', [['run_command', { command: 'node test/run.mjs' }]]],
  ['All tests pass, so the bug is not covered. I will reproduce the customer example.', [['write_file', { path: 'repro.mjs', content: REPRO }]]],
  ['', [['run_command', { command: 'node repro.mjs' }]]],
  [
    'Reproduced: VAT 38.00 € on 200.00 € although the discount brings the net to 180.00 €. Where is computeVat called?',
    [['grep', { pattern: 'computeVat\\(', path: 'src' }]],
  ],
  ['Only invoice.js calls it, without the third argument (scale). Is chargedShare used anywhere?', [['grep', { pattern: 'chargedShare' }]]],
  ['chargedShare exists but nothing calls it. Let me check the rounding helpers it relies on.', [['read_file', { path: 'src/money.js' }]]],
  ['', [['read_file', { path: 'docs/rounding.md' }]]],
  [
    'The docs say VAT is rounded once per category on the taxable total. The tax tests should show how scale is meant to be used.',
    [['read_file', { path: 'test/tax.test.mjs' }]],
  ],
  [
    'The tax test uses scale 9,000 bp for a 10 % discount: exactly what chargedShare returns. Let me check how the renderer shows the taxable amount.',
    [['read_file', { path: 'src/format.js' }]],
  ],
  [
    'format.js prints part.taxable, so once computeVat gets the scale the rendered line will say "on 180.00 €" too. Any other place that uses the discount?',
    [['grep', { pattern: 'discount', include: '*.js', path: 'src' }]],
  ],
  ['', [['read_file', { path: 'test/invoice.test.mjs' }]]],
  [
    'The discount tests check the net but never the VAT. The fix: pass the charged share to computeVat in totals().',
    [['read_file', { path: 'src/invoice.js', offset: 84, limit: 30 }]],
  ],
  ['', [['edit_file', { path: 'src/invoice.js', old_string: BUGGY, new_string: FIXED }]]],
  ['', [['run_command', { command: 'node repro.mjs' }]]],
  ['Now 34.20 € VAT on 180.00 € and total 214.20 €, as the customer expected. The whole suite:', [['run_command', { command: 'node test/run.mjs' }]]],
  [
    'Next, a case with several categories, an exempt line and a fixed discount, to be sure the share is spread correctly.',
    [['write_file', { path: 'repro.mjs', content: REPRO_MIXED }]],
  ],
  ['', [['run_command', { command: 'node repro.mjs' }]]],
  [
    'Subtotal 459.00 €, discount 45.90 €, so 90 % of every category is still charged. Let me confirm exempt lines stay outside the taxable amounts.',
    [['read_file', { path: 'src/tax.js', offset: 38, limit: 25 }]],
  ],
  [
    'taxableByCategory skips exempt lines and the share scales each category: 32,400 and 4,410 cents taxable, 61.56 € and 3.09 € VAT. Correct. Now the regression tests.',
    [['edit_file', { path: 'test/invoice.test.mjs', old_string: "test('a fixed discount is never more than the subtotal', () => {", new_string: REGRESSION }]],
  ],
  ['', [['run_command', { command: 'node test/run.mjs' }]]],
  ['21 tests pass. Does the rendered invoice need a test for the discounted VAT line?', [['read_file', { path: 'test/format.test.mjs' }]]],
  [
    '',
    [
      [
        'edit_file',
        {
          path: 'test/format.test.mjs',
          old_string: '  assert.match(text, /Total +960\\.00 €$/)\n})\n',
          new_string:
            "  assert.match(text, /Total +960\\.00 €$/)\n})\n\ntest('render shows VAT on the discounted amount', () => {\n  const invoice = new Invoice({ number: 'INV-2024-0008', region: 'DE', issued: '2024-05-02' })\n  invoice.addLine({ description: 'Consulting', quantity: 2, unitPrice: 10_000 })\n  invoice.applyDiscount({ code: 'SPRING10', percent: 10 })\n  const text = invoice.render()\n  assert.match(text, /Discount SPRING10 +-20\\.00 €/)\n  assert.match(text, /VAT 19 % on 180\\.00 € +34\\.20 €/)\n  assert.match(text, /Total +214\\.20 €$/)\n})\n",
        },
      ],
    ],
  ],
  ['', [['run_command', { command: 'node test/run.mjs' }]]],
  [
    'All 22 tests pass. Let me also confirm nothing else computes VAT on its own, in case an export path bypasses totals().',
    [['grep', { pattern: 'vatTotal|\\.vat\\b', path: 'src' }]],
  ],
  ['Only totals() and the renderer, which reads totals(). The CHANGELOG next.', [['read_file', { path: 'CHANGELOG.md' }]]],
  [
    '',
    [
      [
        'edit_file',
        {
          path: 'CHANGELOG.md',
          old_string: '# Changelog\n\n## 1.4.2',
          new_string:
            '# Changelog\n\n## 1.4.3\n- Fix: VAT was charged on the subtotal before the discount. It is now charged on the\n  discounted amount, the discount spread over the VAT categories in proportion.\n\n## 1.4.2',
        },
      ],
    ],
  ],
  ['The version in package.json should match the new CHANGELOG entry.', [['read_file', { path: 'package.json' }]]],
  ['', [['edit_file', { path: 'package.json', old_string: '"version": "1.4.2"', new_string: '"version": "1.4.3"' }]]],
  [
    'The reproduction script was only for me; removing it and running the suite a last time.',
    [['run_command', { command: 'rm repro.mjs && node test/run.mjs' }]],
  ],
  ['', [['list_dir', { path: '.', depth: 1 }]]],
  [
    'Done.',
    [
      [
        'finish',
        {
          summary:
            'Invoice.totals() called computeVat(lines, region) without the discount, so VAT was charged on the full subtotal (38.00 € instead of 34.20 € in the report). It now passes this.chargedShare(subtotal, discount), which spreads the discount over the VAT categories in proportion (src/invoice.js). Added regression tests for a percentage discount, a fixed discount over mixed categories with an exempt line, and the rendered VAT line; CHANGELOG 1.4.3 and package.json bumped. All 22 tests pass.',
          status: 'done',
        },
      ],
    ],
  ],
]

const start = Date.parse('2026-11-01T10:00:00.000Z')
const lines = []
let seq = 0
const stamp = () => new Date(start + seq * 7_000).toISOString()
const tokens = (text) => Math.ceil(text.length / 4)
lines.push({ seq: ++seq, role: 'user', content: TASK, timestamp: stamp(), token_count: tokens(TASK) })
turns.forEach(([content, calls], turn) => {
  const tool_calls = calls.map(([name, args], i) => ({
    id: `call_${String(turn + 1).padStart(2, '0')}_${i}`,
    type: 'function',
    function: { name, arguments: JSON.stringify(args) },
  }))
  lines.push({ seq: ++seq, role: 'assistant', content, timestamp: stamp(), token_count: tokens(content) + tokens(JSON.stringify(tool_calls)), tool_calls })
})
const out = fileURLToPath(new URL('../demo/session.jsonl', import.meta.url))
writeFileSync(out, lines.map((l) => `${JSON.stringify(l)}\n`).join(''))
process.stderr.write(`wrote ${out}: ${turns.length} assistant turns\n`)
