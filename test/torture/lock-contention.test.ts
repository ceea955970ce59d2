import { mkdirSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { makeTree } from '../fixtures/tree.js'
import { helper } from '../helpers/run.js'
import { exitOf } from '../helpers/wait.js'
import { record } from './report.js'

/**
 * A task's lock under contention (docs/contract.md §4): 8 processes take and release one
 * task's lock again and again, each holding an O_EXCL marker inside that a second holder at
 * the same moment could not create. `npm test` runs 200 acquisitions each (about 12 s of CPU
 * on 2 cores); `npm run torture` 2,000 (CTXAGENT_TORTURE_LOCK_ROUNDS).
 */
const PROCESSES = 8
const ROUNDS = Number(process.env.CTXAGENT_TORTURE_LOCK_ROUNDS ?? 200)

describe('lock contention', () => {
  it(`${PROCESSES} processes contending ${ROUNDS} times each never hold it at once`, async () => {
    const dir = join(makeTree().base, 'task')
    mkdirSync(dir)
    const children = Array.from({ length: PROCESSES }, () => helper('lock-contend.mjs', [dir, String(ROUNDS)]))
    const outputs = children.map((c) => {
      let out = ''
      c.stdout.on('data', (d: Buffer) => (out += d.toString()))
      return () => out
    })
    const exits = await Promise.all(children.map(exitOf))
    const held = outputs.map((o) => o().trim())
    record('lock-contention', {
      processes: PROCESSES,
      acquisitions: PROCESSES * ROUNDS,
      violations: held.filter((h) => h.includes('VIOLATION')).length,
      exits: [...new Set(exits.map((e) => e.code))].join(' '),
    })
    expect(held).toEqual(Array(PROCESSES).fill(`held ${ROUNDS}`))
    expect(exits.map((e) => e.code)).toEqual(Array(PROCESSES).fill(0))
  }, 600_000)
})
