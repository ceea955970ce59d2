import assert from 'node:assert/strict'
import { dueDate, dueStatus, parseDate } from '../src/dates.js'

const iso = (d) => d.toISOString().slice(0, 10)

test('parseDate refuses dates that do not exist', () => {
  assert.equal(iso(parseDate('2024-02-29')), '2024-02-29')
  assert.throws(() => parseDate('2023-02-29'), /is not a date/)
  assert.throws(() => parseDate('1.3.2024'), /YYYY-MM-DD/)
})

test('net terms add days', () => {
  assert.equal(iso(dueDate(parseDate('2024-03-01'), 'net30')), '2024-03-31')
  assert.equal(iso(dueDate(parseDate('2024-12-20'), 'net14')), '2025-01-03')
})

test('eom is the end of the following month', () => {
  assert.equal(iso(dueDate(parseDate('2024-01-31'), 'eom')), '2024-02-29')
  assert.equal(iso(dueDate(parseDate('2023-12-15'), 'eom')), '2024-01-31')
})

test('dueStatus speaks in days', () => {
  const due = parseDate('2024-03-10')
  assert.equal(dueStatus(due, parseDate('2024-03-12')), 'overdue by 2 days')
  assert.equal(dueStatus(due, parseDate('2024-03-10')), 'due today')
  assert.equal(dueStatus(due, parseDate('2024-03-09')), 'due in 1 day')
})
