// A tiny test runner: imports every test/*.test.mjs, runs the tests they register,
// prints one line per test and a summary. Deterministic output: no timings.
import { readdirSync } from 'node:fs'
import { fileURLToPath } from 'node:url'

const tests = []
globalThis.test = (name, fn) => tests.push({ file: current, name, fn })
let current = ''

const dir = fileURLToPath(new URL('.', import.meta.url))
for (const file of readdirSync(dir).filter((f) => f.endsWith('.test.mjs')).sort()) {
  current = file
  await import(new URL(file, import.meta.url))
}

let failed = 0
let file = ''
for (const t of tests) {
  if (t.file !== file) {
    file = t.file
    console.log(file)
  }
  try {
    await t.fn()
    console.log(`  ✓ ${t.name}`)
  } catch (err) {
    failed++
    console.log(`  ✗ ${t.name}`)
    for (const line of String(err.message).split('\n')) console.log(`      ${line}`)
  }
}
console.log(`\n${tests.length - failed} passed, ${failed} failed`)
process.exitCode = failed > 0 ? 1 : 0
